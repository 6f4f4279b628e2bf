"""Keys (docs/store-contract.md#keys), strict settings (docs/store-contract.md#settings), and the verdict merge
(docs/store-contract.md#verdict-merge)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pidispatch.record import (
    SESSION_REASONS,
    HostVerdict,
    PromotionResult,
    RunnerSession,
    merge_session,
    parse_context,
    parse_runner_session,
)
from pidispatch.settings import ConfigError, Settings
from pidispatch.store.keys import branch_key, issue_key, key_from_parts, pull_request_key

VECTORS = [
    (["github", "octo/repo", "pi/issue-7"], "7a5b816df58a1c8345ced1323e654287"),
    (["github", "octo/repo", "feature/x"], "f3b24ae404dee0f185778be159855147"),
    (["gitlab", "octo/repo", "pi/issue-7"], "65b41b583641efb9d20f29901d699b89"),
    (["github", "a/b", "c"], "b74e485fe9e85698eba11502d5cefe46"),
    (["github", "a", "b/c"], "3f98d407518c8e6761a3696eb2172df3"),
]


@pytest.mark.parametrize(("parts", "key"), VECTORS, ids=["/".join(v[0]) for v in VECTORS])
def test_spec_vectors(parts: list[str], key: str) -> None:
    assert key_from_parts(parts) == key


def test_issue_and_pr_converge() -> None:
    assert issue_key("github", "octo/repo", 7) == pull_request_key("github", "octo/repo", "pi/issue-7", "octo/repo")


@pytest.mark.parametrize(("args", "why"), [
    (("github", "octo/repo", "main", "Octo/repo"), "fork gate is case-sensitive"),
    (("github", "octo/repo", "main", "fork/repo"), "fork"),
    (("github", "octo/repo", "main", None), "deleted fork"),
    (("github", "octo/repo", "", "octo/repo"), "empty head"),
    (("github", "", "main", ""), "empty repo"),
    (("bitbucket", "octo/repo", "main", "octo/repo"), "unknown forge"),
])
def test_pull_request_without_key(args, why: str) -> None:
    assert pull_request_key(*args) is None, why


@pytest.mark.parametrize("number", [0, -1, True, 1.0, "7", None])
def test_issue_number_must_be_a_positive_int(number) -> None:
    assert issue_key("github", "octo/repo", number) is None


def test_repo_is_not_lowercased() -> None:
    assert branch_key("github", "Octo/Repo", "x") != branch_key("github", "octo/repo", "x")


@given(st.lists(st.text(), min_size=1, max_size=4), st.lists(st.text(), min_size=1, max_size=4))
def test_keys_never_collide_on_distinct_part_lists(a: list[str], b: list[str]) -> None:
    # NUL inside a part would make two lists join equal; parts come from forges, which never carry NUL.
    a = [p.replace("\0", "") for p in a]
    b = [p.replace("\0", "") for p in b]
    if a != b:
        assert key_from_parts(a) != key_from_parts(b)
    key = key_from_parts(a)
    assert len(key) == 32 and set(key) <= set("0123456789abcdef")


@pytest.mark.parametrize(("name", "value"), [
    ("PI_SESSIONS_TTL_DAYS", "3.5"), ("PI_SESSIONS_TTL_DAYS", "1e3"), ("PI_SESSIONS_TTL_DAYS", "07"),
    ("PI_SESSIONS_TTL_DAYS", "-1"), ("PI_SESSIONS_TTL_DAYS", "+3"), ("PI_SESSION_MAX_BYTES", "0x10"),
    ("PI_SESSION_MAX_BYTES", "8 MiB"), ("PI_SESSION_MAX_AGE_DAYS", "١"), ("PI_SESSION_MAX_RESUME_CHAIN", "1_000"),
    ("PI_SESSION_MAX_CONTEXT_PCT", "0"), ("PI_SESSION_MAX_CONTEXT_PCT", "101"), ("PI_SESSION_MAX_CONTEXT_PCT", "80%"),
    # Empty is not "unset": only an absent variable takes the default (never silently a default).
    ("PI_SESSION_MAX_AGE_DAYS", ""), ("PI_SESSIONS_TTL_DAYS", "  "), ("PI_SESSION_MAX_CONTEXT_PCT", ""),
])
def test_malformed_settings_are_config_errors(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({name: value})
    assert name in str(err.value) and "expected" in str(err.value)


def test_defaults_and_accepted_forms() -> None:
    assert Settings.from_env({}) == Settings()
    s = Settings.from_env({"PI_SESSIONS_DIR": "/s", "PI_SESSIONS_TTL_DAYS": " 0 ", "PI_SESSION_MAX_BYTES": "0",
                           "PI_SESSION_MAX_CONTEXT_PCT": "100"})
    assert (s.sessions_dir, s.ttl_days, s.max_bytes, s.max_context_pct, s.max_age_days) == ("/s", 0, 0, 100, 0)
    assert Settings.from_env({"PI_SESSIONS_DIR": ""}).sessions_dir is None


@pytest.mark.parametrize(("value", "on"), [("1", True), ("true", False), ("yes", False), (" 1", False),
                                           ("1 ", False)])
def test_gh_hatch_only_for_exact_one(value: str, on: bool) -> None:
    assert Settings.from_env({"PI_SESSIONS_ALLOW_GH_SOURCE": value}).allow_gh_source is on
    with pytest.raises(ConfigError, match="PI_SESSIONS_ALLOW_GH_SOURCE"):
        Settings.from_env({"PI_SESSIONS_ALLOW_GH_SOURCE": ""})


def test_reason_enum_order() -> None:
    assert SESSION_REASONS == (
        "resumed", "absent", "expired", "conversation-too-old", "resume-chain-too-long", "context-too-full",
        "compaction-summary-empty", "too-large", "unparseable", "not-a-regular-file", "key-not-a-directory",
        "transcript-diverted", "venue-changed", "pi-version-changed", "transcript-replaced", "locked",
        "promote-failed", "disabled", "retired", "quarantined", "population-widened")


RESUMED = HostVerdict(True, "resumed", 100)
EXPIRED = HostVerdict(False, "expired", None)
MERGES = [
    ("nothing at all", None, None, None, None),
    ("clean resume and promotion", RESUMED, RunnerSession(True, "resumed"), PromotionResult(True, "promoted", 150),
     {"resumed": True, "reason": "resumed", "bytes": 150}),
    ("host refusal beats runner absent", EXPIRED, RunnerSession(False, "absent"), PromotionResult(True, "promoted", 9),
     {"resumed": False, "reason": "expired", "bytes": 9}),
    ("host resumed, runner degraded to absent", RESUMED, RunnerSession(False, "absent"), None,
     {"resumed": False, "reason": "absent", "bytes": 100}),
    ("host expired, runner unparseable", EXPIRED, RunnerSession(False, "unparseable"), None,
     {"resumed": False, "reason": "unparseable", "bytes": None}),
    ("promotion refusal outranks all", EXPIRED, RunnerSession(False, "absent"), PromotionResult(False, "locked"),
     {"resumed": False, "reason": "locked", "bytes": None}),
    ("failed pod: runner only", RESUMED, RunnerSession(True, "resumed"), None,
     {"resumed": True, "reason": "resumed", "bytes": 100}),
    ("no resume, runner disabled", None, RunnerSession(False, "disabled"), None,
     {"resumed": False, "reason": "disabled", "bytes": None}),
    ("runner silent, host only", EXPIRED, None, None, {"resumed": False, "reason": "expired", "bytes": None}),
    ("runner reason outside the enum", RESUMED, parse_runner_session({"resumed": True, "reason": "/etc/passwd"}),
     None, {"resumed": True, "reason": "resumed", "bytes": 100}),
]


@pytest.mark.parametrize(("host", "runner", "promoted", "expected"), [m[1:] for m in MERGES],
                         ids=[m[0] for m in MERGES])
def test_merge(host, runner, promoted, expected) -> None:
    assert merge_session(host, runner, promoted) == expected


@pytest.mark.parametrize(("report", "parsed"), [
    ({"resumed": True, "reason": "resumed"}, RunnerSession(True, "resumed")),
    ({"resumed": 1, "reason": "resumed"}, None),
    ({"resumed": False, "reason": "sessions-dir-unset"}, RunnerSession(False, None)),
    ({"resumed": False}, RunnerSession(False, None)),
    ("resumed", None),
    (None, None),
])
def test_runner_session_is_accepted_only_in_shape(report, parsed) -> None:
    assert parse_runner_session(report) == parsed


@pytest.mark.parametrize(("report", "parsed"), [
    ({"tokens": 10, "window": 100}, (10, 100)), ({"tokens": 0, "window": 1}, (0, 1)),
    ({"tokens": -1, "window": 100}, None), ({"tokens": 1, "window": 0}, None),
    ({"tokens": True, "window": 100}, None), ({"tokens": 1.5, "window": 100}, None),
    ({"tokens": float("nan"), "window": 100}, None), ({"tokens": 2**53, "window": 100}, None),
    ({"tokens": 10.0, "window": 100.0}, (10, 100)), ([10, 100], None),
])
def test_context_report(report, parsed) -> None:
    assert parse_context(report) == parsed
