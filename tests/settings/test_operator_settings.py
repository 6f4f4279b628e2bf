"""The operator's env contract (OperatorSettings): defaults, strict parsing, and a loud exit 2 at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pidispatch.settings import (
    DEFAULT_JOB_COMMAND,
    DEFAULT_JOB_IMAGE,
    DEFAULT_STAGING_DIR,
    ConfigError,
    OperatorSettings,
    Settings,
)
from testkit.env import clean_env

OPERATOR_VARIABLES = (
    "PI_DISPATCH_NAMESPACE", "PI_DISPATCH_STAGING_DIR", "PI_DISPATCH_STAGING_CLAIM", "PI_DISPATCH_MAX_CONCURRENT_JOBS",
    "PI_DISPATCH_JOB_IMAGE", "PI_DISPATCH_JOB_COMMAND", "PI_DISPATCH_METRICS_PORT", "PI_DISPATCH_HEALTH_PORT",
    "PI_DISPATCH_LEASE", "PI_DISPATCH_RESUMABLE_REFRESH_SECONDS", "PI_DISPATCH_SWEEP_INTERVAL_SECONDS",
)


def test_defaults() -> None:
    s = OperatorSettings.from_env({})
    assert s == OperatorSettings(store=Settings())
    assert (s.namespace, s.staging_dir, s.staging_claim, s.max_concurrent_jobs, s.job_image, s.job_command) == (
        None, "/var/lib/pi-dispatch/jobs", None, 4, "ghcr.io/pi-dispatch/job:latest", ("pidispatch", "runner"))
    assert (s.metrics_port, s.health_port, s.lease, s.resumable_refresh_seconds, s.sweep_interval_seconds) == (
        9090, 8080, "pi-dispatch", 300, 3600)
    assert (DEFAULT_STAGING_DIR, DEFAULT_JOB_IMAGE, DEFAULT_JOB_COMMAND) == (
        s.staging_dir, s.job_image, s.job_command)


def test_an_empty_value_is_refused_naming_it() -> None:
    """An empty value is a configuration error, never the default (issue 15: an empty GITHUB_AUTH_SOURCE
    once meant gh). The chart renders no empty value (tests/settings/test_settings_strict.py covers every variable)."""
    for name in OPERATOR_VARIABLES:
        if name == "PI_SESSIONS_DIR":  # empty = unset (docs/store-contract.md#settings)
            continue
        with pytest.raises(ConfigError, match=name):
            OperatorSettings.from_env({name: ""})


def test_values_are_read() -> None:
    s = OperatorSettings.from_env({
        "PI_DISPATCH_NAMESPACE": "pi", "PI_DISPATCH_STAGING_DIR": "/stage", "PI_DISPATCH_STAGING_CLAIM": "pi-staging",
        "PI_DISPATCH_MAX_CONCURRENT_JOBS": " 12 ", "PI_DISPATCH_JOB_IMAGE": "registry/job:1",
        "PI_DISPATCH_JOB_COMMAND": '["python", "-m", "pidispatch", "runner"]', "PI_DISPATCH_METRICS_PORT": "0",
        "PI_DISPATCH_HEALTH_PORT": "65535", "PI_DISPATCH_LEASE": "peers",
        "PI_DISPATCH_RESUMABLE_REFRESH_SECONDS": "5", "PI_DISPATCH_SWEEP_INTERVAL_SECONDS": "604800",
        "PI_SESSIONS_DIR": "/sessions",
    })
    assert s == OperatorSettings(
        store=Settings(sessions_dir="/sessions"), namespace="pi", staging_dir="/stage", staging_claim="pi-staging",
        max_concurrent_jobs=12, job_image="registry/job:1", job_command=("python", "-m", "pidispatch", "runner"),
        metrics_port=0, health_port=65535, lease="peers", resumable_refresh_seconds=5,
        sweep_interval_seconds=604800)


MALFORMED = [
    ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "0"), ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "abc"),
    ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "07"), ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "-1"),
    ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "+4"), ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "4.0"),
    ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "10001"),
    ("PI_DISPATCH_JOB_COMMAND", "not json"), ("PI_DISPATCH_JOB_COMMAND", "[]"), ("PI_DISPATCH_JOB_COMMAND", "[1]"),
    ("PI_DISPATCH_JOB_COMMAND", '""'), ("PI_DISPATCH_JOB_COMMAND", '[""]'),
    ("PI_DISPATCH_JOB_COMMAND", '["pidispatch", null]'), ("PI_DISPATCH_JOB_COMMAND", '"pidispatch runner"'),
    ("PI_DISPATCH_JOB_COMMAND", '{"cmd": "pidispatch"}'), ("PI_DISPATCH_JOB_COMMAND", "pidispatch runner"),
    ("PI_DISPATCH_METRICS_PORT", "65536"), ("PI_DISPATCH_METRICS_PORT", "-1"), ("PI_DISPATCH_METRICS_PORT", "http"),
    ("PI_DISPATCH_HEALTH_PORT", "70000"), ("PI_DISPATCH_HEALTH_PORT", "8080.5"),
    ("PI_DISPATCH_RESUMABLE_REFRESH_SECONDS", "4"), ("PI_DISPATCH_RESUMABLE_REFRESH_SECONDS", "86401"),
    ("PI_DISPATCH_SWEEP_INTERVAL_SECONDS", "9"), ("PI_DISPATCH_SWEEP_INTERVAL_SECONDS", "1h"),
    ("PI_SESSION_MAX_BYTES", "8MiB"), ("PI_SESSIONS_TTL_DAYS", "07"),
]


@pytest.mark.parametrize(("variable", "value"), MALFORMED, ids=[f"{v}={x!r}" for v, x in MALFORMED])
def test_malformed_value_is_a_config_error_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        OperatorSettings.from_env({variable: value})
    assert err.value.variable == variable
    assert str(err.value).startswith(f"{variable}=") and "expected" in str(err.value)


@pytest.mark.parametrize(("variable", "value"), [
    ("PI_DISPATCH_MAX_CONCURRENT_JOBS", "0"), ("PI_DISPATCH_JOB_COMMAND", "[1]"),
    ("PI_DISPATCH_METRICS_PORT", "65536"), ("PI_SESSION_MAX_CONTEXT_PCT", "101"),
], ids=["max jobs 0", "command [1]", "metrics port 65536", "store bound"])
def test_operator_with_a_bad_value_exits_2_with_one_line(tmp_path: Path, variable: str, value: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pidispatch", "operator"], capture_output=True, text=True,
                            env=clean_env(tmp_path, **{variable: value}), stdin=subprocess.DEVNULL, timeout=60,
                            cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert variable in lines[0] and repr(value) in lines[0] and "expected" in lines[0]


@pytest.mark.parametrize("raw", ['{"PI_SESSION_FILE":"/x"}', '["A"]', '{"A":1}', '{"":"x"}', "nope"],
                         ids=["a session name", "not an object", "a non-string value", "an empty name", "not JSON"])
def test_job_env_is_a_json_object_without_session_names(raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        OperatorSettings.from_env({"PI_DISPATCH_JOB_ENV": raw})
    assert caught.value.variable == "PI_DISPATCH_JOB_ENV"


def test_job_env_is_read_in_name_order() -> None:
    settings = OperatorSettings.from_env({"PI_DISPATCH_JOB_ENV": '{"PI_OFFLINE":"1","A":"b"}'})
    assert settings.job_env == (("A", "b"), ("PI_OFFLINE", "1"))
