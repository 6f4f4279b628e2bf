"""The GitHub settings of the operator (OperatorSettings.github): defaults, strict parsing, combinations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pidispatch.api.crds import AUTH_SOURCES
from pidispatch.forge.credentials import Mint, SecretRef, job_credential
from pidispatch.settings import AUTH_SOURCES as SETTINGS_AUTH_SOURCES
from pidispatch.settings import ConfigError, GitHubSettings, OperatorSettings

APP = {"GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345", "GITHUB_APP_INSTALLATION_ID": "678",
       "GITHUB_APP_PRIVATE_KEY_FILE": "/var/run/secrets/pi-dispatch/github-app/private-key.pem"}
PAT = {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_TOKEN_FILE": "/var/run/secrets/pi-dispatch/github-token/token",
       "GITHUB_TOKEN_SECRET": "github-token/token"}


def test_auth_sources_are_the_crds() -> None:
    assert SETTINGS_AUTH_SOURCES == AUTH_SOURCES


def test_defaults_configure_no_client() -> None:
    github = OperatorSettings.from_env({}).github
    assert github == GitHubSettings()
    assert (github.api_url, github.timeout_seconds, github.app_configured, github.token_file, github.token_secret) == (
        "https://api.github.com", 10, False, None, None)


def test_an_empty_value_is_refused_naming_it() -> None:
    names = ["GITHUB_API_URL", "GITHUB_AUTH_SOURCE", "GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID",
             "GITHUB_APP_PRIVATE_KEY_FILE", "GITHUB_TOKEN_FILE", "GITHUB_TOKEN_SECRET", "GITHUB_API_TIMEOUT_SECONDS"]
    for name in names:
        with pytest.raises(ConfigError, match=name):
            OperatorSettings.from_env({name: " "})


def test_app_settings_are_read() -> None:
    github = OperatorSettings.from_env({**APP, "GITHUB_API_URL": "https://ghe.example.com/api/v3/",
                                        "GITHUB_API_TIMEOUT_SECONDS": "3"}).github
    assert github == GitHubSettings(api_url="https://ghe.example.com/api/v3", app_id=12345, app_installation_id=678,
                                    app_private_key_file=APP["GITHUB_APP_PRIVATE_KEY_FILE"], timeout_seconds=3)
    assert github.app_configured


def test_token_settings_are_read() -> None:
    github = OperatorSettings.from_env(PAT).github
    assert (github.token_file, github.token_secret, github.app_configured) == (
        PAT["GITHUB_TOKEN_FILE"], ("github-token", "token"), False)


MALFORMED = [
    ("unknown auth source", {"GITHUB_AUTH_SOURCE": "token"}, "GITHUB_AUTH_SOURCE"),
    ("auth source with a space", {"GITHUB_AUTH_SOURCE": " app"}, "GITHUB_AUTH_SOURCE"),
    ("api url without scheme", {"GITHUB_API_URL": "api.github.com"}, "GITHUB_API_URL"),
    ("api url with a query", {"GITHUB_API_URL": "https://api.github.com?x=1"}, "GITHUB_API_URL"),
    ("api url with credentials", {"GITHUB_API_URL": "https://user:pw@api.github.com"}, "GITHUB_API_URL"),
    ("app id not a number", {**APP, "GITHUB_APP_ID": "my-app"}, "GITHUB_APP_ID"),
    ("app id zero", {**APP, "GITHUB_APP_ID": "0"}, "GITHUB_APP_ID"),
    ("app id with a leading zero", {**APP, "GITHUB_APP_ID": "012"}, "GITHUB_APP_ID"),
    ("installation id negative", {**APP, "GITHUB_APP_INSTALLATION_ID": "-5"}, "GITHUB_APP_INSTALLATION_ID"),
    ("key file relative", {**APP, "GITHUB_APP_PRIVATE_KEY_FILE": "key.pem"}, "GITHUB_APP_PRIVATE_KEY_FILE"),
    ("app without installation", {k: v for k, v in APP.items() if k != "GITHUB_APP_INSTALLATION_ID"},
     "GITHUB_APP_INSTALLATION_ID"),
    ("app without key file", {k: v for k, v in APP.items() if k != "GITHUB_APP_PRIVATE_KEY_FILE"},
     "GITHUB_APP_PRIVATE_KEY_FILE"),
    ("key file without app id", {"GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_PRIVATE_KEY_FILE": "/k.pem"},
     "GITHUB_APP_ID"),
    ("app settings with the pat source", {**APP, "GITHUB_AUTH_SOURCE": "pat"}, "GITHUB_APP_ID"),
    ("app settings with the default gh source", {k: v for k, v in APP.items() if k != "GITHUB_AUTH_SOURCE"},
     "GITHUB_APP_ID"),
    ("token file with the app source", {**APP, "GITHUB_TOKEN_FILE": "/t"}, "GITHUB_TOKEN_FILE"),
    ("token secret with the app source", {"GITHUB_AUTH_SOURCE": "app", "GITHUB_TOKEN_SECRET": "s/k"},
     "GITHUB_TOKEN_SECRET"),
    ("token secret without a key", {**PAT, "GITHUB_TOKEN_SECRET": "github-token"}, "GITHUB_TOKEN_SECRET"),
    ("token secret with an upper-case name", {**PAT, "GITHUB_TOKEN_SECRET": "GitHub/token"}, "GITHUB_TOKEN_SECRET"),
    ("token secret key with a slash", {**PAT, "GITHUB_TOKEN_SECRET": "s/a/b"}, "GITHUB_TOKEN_SECRET"),
    ("token file relative", {**PAT, "GITHUB_TOKEN_FILE": "token"}, "GITHUB_TOKEN_FILE"),
    ("timeout zero", {"GITHUB_API_TIMEOUT_SECONDS": "0"}, "GITHUB_API_TIMEOUT_SECONDS"),
    ("timeout fractional", {"GITHUB_API_TIMEOUT_SECONDS": "2.5"}, "GITHUB_API_TIMEOUT_SECONDS"),
]


@pytest.mark.parametrize(("env", "variable"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_github_settings_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as err:
        OperatorSettings.from_env(env)
    assert err.value.variable == variable, str(err.value)
    assert "expected" in str(err.value)


def test_a_bad_github_value_stops_the_operator_with_exit_2(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "pidispatch", "operator"], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GITHUB_AUTH_SOURCE": "app",
                                 "GITHUB_APP_ID": "x"}, stdin=subprocess.DEVNULL, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "GITHUB_APP_ID" in result.stderr


def test_an_unreadable_app_key_stops_the_operator_with_exit_2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **APP,
           "GITHUB_APP_PRIVATE_KEY_FILE": str(tmp_path / "missing.pem")}
    result = subprocess.run([sys.executable, "-m", "pidispatch", "operator"], capture_output=True, text=True,
                            env=env, stdin=subprocess.DEVNULL, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "GITHUB_APP_PRIVATE_KEY_FILE" in result.stderr and "missing.pem" in result.stderr


# ---- which token a job Pod gets -------------------------------------------------------------------------

APP_SETTINGS = OperatorSettings.from_env(APP).github
PAT_SETTINGS = OperatorSettings.from_env(PAT).github
NOTHING = GitHubSettings()

CREDENTIALS = [
    ("app configured: minted for the job's repository", "app", APP_SETTINGS, Mint("acme/widgets")),
    ("app not configured: no token, as before", "app", NOTHING, None),
    ("pat: the deployment's Secret by reference", "pat", PAT_SETTINGS, SecretRef("github-token", "token")),
    ("gh: the same delivery as pat", "gh", PAT_SETTINGS, SecretRef("github-token", "token")),
    ("pat without a token Secret: no token", "pat", NOTHING, None),
    ("a job asking for pat on an App deployment gets no App token", "pat", APP_SETTINGS, None),
    ("a job asking for app on a pat deployment gets no pat", "app", PAT_SETTINGS, None),
]


@pytest.mark.parametrize(("source", "github", "expected"), [c[1:] for c in CREDENTIALS],
                         ids=[c[0] for c in CREDENTIALS])
def test_job_credential(source: str, github: GitHubSettings, expected: object) -> None:
    assert job_credential(source, "acme/widgets", github) == expected
