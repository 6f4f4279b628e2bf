"""The admission is a failure-named policy chain (``jobflow/admit.py``, cert-manager's shape): its order is a contract.

The store contract's two refusals (``sessions-dir-unset``, ``config-refused``) come last, after everything that is
not about the store (docs/store-contract.md#refusals); a Job that breaks two rules is refused for the earlier one.
"""

from __future__ import annotations

from pidispatch.api.views import JobView, TriggerView
from pidispatch.jobflow import admit
from pidispatch.settings import Settings

ORDER = ("invalid_spec", "trigger_not_found", "trigger_not_ready",
         "auth_beyond_trigger", "replica_beyond", "repository_beyond_trigger",
         "fork_not_allowed", "flow_on_fork",
         "sessions_dir_unset", "config_refused")


def test_the_chain_runs_its_checks_in_the_contract_s_order() -> None:
    assert admit.chain() == ORDER


def test_the_first_check_that_refuses_wins() -> None:
    """A Job for a repository its Trigger does not serve, from a fork, on a Trigger that arms resume with no store
    and a gh login: ``beyond-trigger`` (the earliest), then with each fixed the next in the chain."""
    trigger = TriggerView.of({"metadata": {"name": "t"}, "spec": {
        "on": {"event": "issue_comment.created", "phrase": "@pi", "repositories": ["acme/*"]},
        "run": {"model": "fake/fake-model", "resume": True, "auth": "gh"}}})
    worst = Settings(sessions_dir=None, github_auth_source="gh")

    def refused(settings: Settings = worst, **spec: object) -> str | None:
        job = JobView.of({"metadata": {"name": "j"}, "spec": {"trigger": "t", "forge": "github", "issue": 7, **spec}})
        answer = admit.refusal(job, trigger, settings)
        return answer.condition_reason if answer is not None else None

    assert refused(repository="other/api") == "BeyondTrigger"
    assert refused(repository="acme/api", pullRequest=3, fork=True) == "ForkNotAllowed"
    assert refused(repository="acme/api") == "SessionsDirUnset"
    assert refused(Settings(sessions_dir="/s", github_auth_source="gh"), repository="acme/api") == "ConfigRefused"
    hatch = Settings(sessions_dir="/s", github_auth_source="gh", allow_gh_source=True)
    assert refused(hatch, repository="acme/api") is None
