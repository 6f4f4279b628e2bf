"""The spec's refusal log events (§9.3, §10), and the uid job Pods run as, from the controller itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_operator_queue import JOBS, NS, TRIGGERS, Clock, MemoryApi, pump

from pidispatch.api.crds import GROUP, VERSION
from pidispatch.jobflow.pod import job_pod_uid
from pidispatch.manifests.pod import PodInputs
from pidispatch.settings import OperatorSettings, Settings

ARMED = {"model": "fake/fake-model", "piVersion": "0.73.1", "resume": True}


def armed_job(api: MemoryApi, name: str) -> dict:
    return api.create(JOBS, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "metadata": {"name": name},
                             "spec": {"trigger": "armed", "forge": "github", "repository": "acme/widgets",
                                      "comment": "@pi go", "issue": 3}})


@pytest.mark.parametrize(("store", "source", "event", "fields"), [
    (None, "app", "refused_sessions_dir_unset", {"kind": "github"}),
    ("/srv/sessions", "gh", "refused_config", {"kind": "github", "refunded": False}),
], ids=["no store", "gh source"])
def test_a_refusal_logs_the_spec_s_event(tmp_path: Path, events, store: str | None, source: str, event: str,
                                         fields: dict) -> None:
    api = MemoryApi()
    api.create(TRIGGERS, {"metadata": {"name": "armed"}, "spec": {
        "on": {"event": "issue_comment.created", "phrase": "@pi"}, "run": ARMED}})
    settings = OperatorSettings(store=Settings(sessions_dir=store, github_auth_source=source),
                                staging_dir=str(tmp_path), max_concurrent_jobs=1)
    from pidispatch.jobflow.dispatcher import Dispatcher
    from pidispatch.slots import Slots

    c = Dispatcher(settings, api, NS)  # type: ignore[arg-type]
    c.slots = Slots(1, clock=Clock())
    c.on_job("ADDED", armed_job(api, "refused"))
    pump(c)
    assert (api.job("refused").get("status") or {}).get("phase") == "Refused"
    assert api.pods() == [], "a refusal comes before any Pod"
    logged = [e for e in events() if e["event"] == event]
    assert logged == [{"event": event, **fields}]


def _uid_seen_as(uid: int) -> int:
    """``job_pod_uid()`` in a forked child running as ``uid`` (reported through a pipe)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            if uid != os.getuid():
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            os.write(write_end, str(job_pod_uid()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        seen = answer.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return int(seen)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs root (CI runs as root)")
def test_job_pods_run_as_the_operator_s_uid_unless_it_is_root() -> None:
    """The staged copy is 0600 in a 0700 directory of the operator's uid: the Pod must run as that uid."""
    assert _uid_seen_as(1000) == 1000
    assert _uid_seen_as(0) == PodInputs.run_as_user, "root keeps the restricted profile's non-root default"
