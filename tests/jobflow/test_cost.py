"""What a job cost, by how it started: the label of the fleet's metrics, and the SessionKey's counters (written
through ``sessionkey.write`` on ``MemoryApi``, the store real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pidispatch import metrics
from pidispatch.api.crds import GROUP, VERSION
from pidispatch.api.models import JobSession, KeyUsage, SessionKeyStatus, problem
from pidispatch.costreport import report, table
from pidispatch.jobflow import sessionkey
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.cost import RECENT_JOBS, JobUsage, counted, per_job, session_start, usage_patch
from pidispatch.jobflow.summarize_sessionkey import JudgedWith, LastJob
from pidispatch.settings import OperatorSettings
from testkit.memoryapi import NS, MemoryApi
from testkit.store import KEY, Store

SESSIONKEYS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/sessionkeys"


@pytest.mark.parametrize(("session", "start"), [
    (JobSession(resumed=True, reason="resumed"), "resumed"),
    (JobSession(resumed=False, reason="pi-version-changed", rethreaded=True), "rethreaded"),
    (JobSession(resumed=False, reason="pi-version-changed"), "cold"),
    (JobSession(resumed=False, reason="absent"), "cold"),
    (JobSession(resumed=False, reason="disabled"), "none"),
    (None, "none"),
], ids=["a resumed job", "a rethreaded job is not cold", "a refused resume without a letter is cold",
        "a first job is cold", "a Trigger without resume has no session", "no session at all"])
def test_how_a_job_started(session: JobSession | None, start: str) -> None:
    assert session_start(session) == start


TOKENS = {"input": 600, "output": 9, "cacheRead": 200, "cacheWrite": 0, "total": 809, "calls": 1, "unpriced": 1}


@pytest.mark.parametrize(("before", "job", "start", "tokens", "after"), [
    (None, "j1", "cold", TOKENS, {"cold": {"jobs": 1, **TOKENS}, "recentJobs": ["j1"]}),
    ({"cold": {"jobs": 1, **TOKENS}, "recentJobs": ["j1"]}, "j1", "cold", TOKENS,
     {"cold": {"jobs": 1, **TOKENS}, "recentJobs": ["j1"]}),
    ({"cold": {"jobs": 1, "total": 5}, "recentJobs": ["j1"]}, "j2", "resumed", {"total": 7, "cost": 0.5},
     {"cold": {"jobs": 1, "total": 5}, "resumed": {"jobs": 1, "total": 7, "cost": 0.5}, "recentJobs": ["j1", "j2"]}),
    ({"resumed": {"jobs": 2, "total": 10, "cost": 0.25}}, "j3", "resumed", {"total": 5, "unpriced": 1},
     {"resumed": {"jobs": 3, "total": 15, "cost": 0.25, "unpriced": 1}, "recentJobs": ["j3"]}),
    (None, "j4", "rethreaded", None, {"rethreaded": {"jobs": 1}, "recentJobs": ["j4"]}),
    (None, "j5", "none", TOKENS, {}),
], ids=["a first cold job", "the same job's end written twice counts once",
        "each start keeps its own counters", "an unpriced job adds no cost and says so",
        "a job without a token report still counts as a job", "a job without a session is no key's"])
def test_a_key_counts_each_job_once_by_its_start(before: dict | None, job: str, start: str,
                                                 tokens: dict[str, float] | None, after: dict) -> None:
    read = None if before is None else KeyUsage.model_validate(before)  # as the SessionKey's view reads it
    patch = usage_patch(counted(read, job, start, tokens))
    assert patch == after
    # Whole counts stay integers in the patch, as they were before the view read them as floats.
    assert all(type(v) is type(after[s][k]) for s in ("cold", "resumed") for k, v in patch.get(s, {}).items())


def test_the_remembered_jobs_are_bounded() -> None:
    usage = KeyUsage()
    for i in range(RECENT_JOBS + 5):
        usage = counted(usage, f"j{i}", "cold", {"total": 1})
    dumped = usage_patch(usage)
    assert dumped["cold"] == {"jobs": RECENT_JOBS + 5, "total": RECENT_JOBS + 5}
    assert dumped["recentJobs"] == [f"j{i}" for i in range(5, RECENT_JOBS + 5)]
    assert problem(SessionKeyStatus, {"usage": dumped}) is None
    assert per_job(usage, "cold") == 1 and per_job(usage, "resumed") is None and per_job(None, "cold") is None


def ended_as(job: str) -> LastJob:
    """The last job's facts a job's end tells its key (its pi and model unknown here)."""
    return LastJob(job, None, JudgedWith(None, None, None))


def test_the_sessionkey_status_counts_the_jobs_that_ended_and_a_refresh_keeps_them(store: Store,
                                                                                   tmp_path: Path) -> None:
    store.put(key=KEY)
    api = MemoryApi()
    api.create(SESSIONKEYS, {"metadata": {"name": KEY}, "spec": {"forge": "github", "repository": "acme/widgets",
                                                               "branch": "main"}})
    settings = OperatorSettings(store=store.settings, staging_dir=str(tmp_path / "staging"))
    cluster = Cluster(api, NS)  # type: ignore[arg-type]
    ended = [JobUsage("cold-1", "cold", {"total": 1000, "input": 990, "output": 10}),
             JobUsage("resumed-1", "resumed", {"total": 300, "input": 200, "output": 10, "cacheRead": 90}),
             JobUsage("resumed-1", "resumed", {"total": 300, "input": 200, "output": 10, "cacheRead": 90}),
             JobUsage("rethreaded-1", "rethreaded", {"total": 500})]
    for job in ended:
        sessionkey.write(settings, cluster, KEY, [ended_as(job.job), job])
    sessionkey.write(settings, cluster, KEY)  # the timer's refresh: no job ended
    status = api.get(f"{SESSIONKEYS}/{KEY}")["status"]
    assert status["usage"] == {
        "cold": {"jobs": 1, "total": 1000, "input": 990, "output": 10},
        "resumed": {"jobs": 1, "total": 300, "input": 200, "output": 10, "cacheRead": 90},
        "rethreaded": {"jobs": 1, "total": 500},
        "recentJobs": ["cold-1", "resumed-1", "rethreaded-1"]}
    assert problem(SessionKeyStatus, status) is None


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_fleet_metrics_count_jobs_and_tokens_by_start() -> None:
    rethreaded = session_start(JobSession(resumed=False, reason="pi-version-changed", rethreaded=True))
    before = {n: sample(n, session="rethreaded") for n in ("pidispatch_job_tokens_total",
                                                            "pidispatch_jobs_ended_total",
                                                            "pidispatch_jobs_measured_total")}
    cold_before = sample("pidispatch_job_tokens_total", session="cold")
    metrics.observe_job_usage(rethreaded, {"total": 500, "input": 400, "cacheRead": 50, "cost": 0.01})
    metrics.observe_job_usage(rethreaded, {})  # ended without a report: a job, no tokens
    assert sample("pidispatch_job_tokens_total", session="rethreaded") - before["pidispatch_job_tokens_total"] == 500
    assert sample("pidispatch_jobs_ended_total", session="rethreaded") - before["pidispatch_jobs_ended_total"] == 2
    assert sample("pidispatch_jobs_measured_total", session="rethreaded") - before[
        "pidispatch_jobs_measured_total"] == 1
    assert sample("pidispatch_job_token_parts_total", session="rethreaded", part="cacheRead") >= 50
    assert sample("pidispatch_job_cost_dollars_total", session="rethreaded") >= 0.01
    assert sample("pidispatch_job_tokens_total", session="cold") == cold_before, "a rethreaded job is not cold"


def sk(name: str, repository: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"forge": "github", "repository": repository, "branch": "main"},
            "status": {"usage": usage} if usage is not None else {}}


def test_the_report_reads_each_keys_counters_and_sums_them() -> None:
    keys = [sk("b" * 32, "acme/zeta", {"cold": {"jobs": 1, "total": 1000, "cost": 0.5},
                                       "resumed": {"jobs": 3, "total": 600, "cost": 0.25, "unpriced": 1}}),
            sk("a" * 32, "acme/alpha", {"rethreaded": {"jobs": 2, "total": 900}}),
            sk("c" * 32, "acme/new", None)]  # created with its first Pod, no job ended yet
    data = report(keys)
    assert [r["repository"] for r in data["keys"]] == ["acme/alpha", "acme/new", "acme/zeta"]
    zeta = data["keys"][2]
    assert (zeta["resumed"]["perJob"], zeta["cold"]["perJob"], zeta["rethreaded"]["perJob"]) == (200, 1000, None)
    assert zeta["resumeRate"] == 0.75
    assert data["keys"][1]["resumeRate"] is None
    total = data["total"]
    assert {s: total[s]["jobs"] for s in ("resumed", "rethreaded", "cold")} == {"resumed": 3, "rethreaded": 2,
                                                                                "cold": 1}
    assert total["cold"]["total"] == 1000 and total["rethreaded"]["perJob"] == 450
    text = table(data)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["KEY", "REPOSITORY", "BRANCH", "JOBS"]
    assert "b" * 32 in lines[3] and "3/0/1" in lines[3] and "75%" in lines[3] and "$0.7500+" in lines[3]
    assert lines[-1].startswith("all keys") and "3/2/1" in lines[-1]
    assert "no SessionKeys" in table(report([]))


class RacingApi(MemoryApi):
    """``MemoryApi`` that lets another job's end land once, between a read of the SessionKey and its write."""

    def __init__(self) -> None:
        super().__init__()
        self.before_patch: Any = None

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.before_patch is not None:
            hook, self.before_patch = self.before_patch, None
            hook()
        return super().patch(path, body)


def test_two_jobs_ending_at_once_on_one_key_are_both_counted(store: Store, tmp_path: Path) -> None:
    store.put(key=KEY)
    api = RacingApi()
    api.create(SESSIONKEYS, {"metadata": {"name": KEY}, "spec": {"forge": "github", "repository": "acme/widgets",
                                                               "branch": "main"}})
    settings = OperatorSettings(store=store.settings, staging_dir=str(tmp_path / "staging"))
    cluster = Cluster(api, NS)  # type: ignore[arg-type]
    other = JobUsage("other", "cold", {"total": 100})
    api.before_patch = lambda: sessionkey.write(settings, cluster, KEY, [ended_as("other"), other])
    sessionkey.write(settings, cluster, KEY, [ended_as("mine"), JobUsage("mine", "cold", {"total": 50})])
    usage = api.get(f"{SESSIONKEYS}/{KEY}")["status"]["usage"]
    assert usage["cold"] == {"jobs": 2, "total": 150}, "a count lost to the other job's write"
    assert sorted(usage["recentJobs"]) == ["mine", "other"]
