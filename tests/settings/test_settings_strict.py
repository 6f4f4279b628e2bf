"""Strict settings everywhere (issue 15 item 1): an empty value of any setting the operator, the receiver or
the runner reads is a configuration error naming the variable, never a silent default.

Found by reading the code: an empty ``GITHUB_AUTH_SOURCE`` became ``gh`` (the full-scope credential), and
empty JSON, integer and GitHub text settings took their defaults. The one documented exception is
``PI_SESSIONS_DIR`` (empty means unset: docs/store-contract.md#settings).

The lists of variables are held to the code: every ``PI_*``/``GITHUB_*`` name a settings module spells
out must be in its component's list, so a setting added later cannot skip the rule.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pidispatch.receiver.settings import ENV_NAMES as RECEIVER_VARIABLES
from pidispatch.receiver.settings import ReceiverSettings
from pidispatch.runner.config import ConfigError as RunnerConfigError
from pidispatch.runner.config import Env, load_config
from pidispatch.settings import EMPTY_MEANS_UNSET, OPERATOR_VARIABLES, ConfigError, OperatorSettings, Settings

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "pidispatch"
NAME = re.compile(r'"((?:PI|GITHUB)_[A-Z0-9_]+)"')
RECEIVER_BASE = {"PI_DISPATCH_NAMESPACE": "pi", "GITHUB_WEBHOOK_SECRET": "s3cret"}
RUNNER_BASE = {"PI_REPOSITORY": "octo/repo", "PI_ISSUE": "7"}
EMPTIES = ["", " ", "\t\n"]
# Spelled in settings/ but not read from the environment: names the job's env may not use.
NOT_SETTINGS = {"PI_OFFLINE", "PI_SESSION"}


def operator(env: dict[str, str]) -> object:
    return OperatorSettings.from_env(env)


def receiver(env: dict[str, str]) -> object:
    return ReceiverSettings.from_env({**RECEIVER_BASE, **env})


def runner(env: dict[str, str]) -> object:
    return load_config({**RUNNER_BASE, **env})


CASES = ([("operator", name, operator, ConfigError) for name in OPERATOR_VARIABLES]
         + [("receiver", name, receiver, ConfigError) for name in RECEIVER_VARIABLES]
         + [("runner", env.value, runner, RunnerConfigError) for env in Env])


@pytest.mark.parametrize("empty", EMPTIES, ids=["empty", "blank", "whitespace"])
@pytest.mark.parametrize(("component", "name", "load", "error"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_an_empty_setting_is_refused_naming_it(component: str, name: str, load, error: type[Exception],
                                               empty: str) -> None:
    if name in EMPTY_MEANS_UNSET:
        assert load({name: empty}) == load({}), f"{name}: empty means unset (docs/store-contract.md#settings)"
        return
    with pytest.raises(error) as caught:
        load({name: empty})
    message = str(caught.value)
    assert name in message and "\n" not in message, message


def test_an_empty_auth_source_is_never_the_full_scope_credential() -> None:
    """The finding itself: an empty GITHUB_AUTH_SOURCE used to mean gh, everywhere it is read."""
    for load in (lambda env: Settings.from_env(env), operator, receiver):
        with pytest.raises(ConfigError, match="GITHUB_AUTH_SOURCE"):
            load({"GITHUB_AUTH_SOURCE": ""})


def _spelled(path: Path) -> set[str]:
    return set(NAME.findall(path.read_text()))


def test_every_operator_variable_the_code_spells_is_in_the_list() -> None:
    # Every module of the settings package but __init__.py, whose __all__ names Python names, not variables, and
    # gatewayserver.py, the gateway process's own (the next test).
    modules = [path for path in (PACKAGE / "settings").glob("*.py")
               if path.name not in ("__init__.py", "gatewayserver.py")]
    assert len(modules) > 1, "the settings package moved: point this test at it"
    spelled = set().union(*(_spelled(path) for path in modules)) - NOT_SETTINGS
    assert sorted(spelled - set(OPERATOR_VARIABLES)) == [], "add it to settings.OPERATOR_VARIABLES"


def test_every_gateway_variable_the_code_spells_is_in_its_list() -> None:
    from pidispatch.settings import gatewayserver

    spelled = _spelled(PACKAGE / "settings" / "gatewayserver.py")
    assert sorted(spelled - set(gatewayserver.ENV_NAMES)) == [], "add it to settings.gatewayserver.ENV_NAMES"


def test_every_receiver_variable_the_code_spells_is_in_the_list() -> None:
    spelled = _spelled(PACKAGE / "receiver" / "settings.py")
    assert sorted(spelled - set(RECEIVER_VARIABLES)) == [], "add it to receiver.settings.ENV_NAMES"


def test_every_runner_variable_the_code_reads_is_an_env_member() -> None:
    source = (PACKAGE / "runner" / "config.py").read_text()
    read = set(re.findall(r"_value\(env, Env\.([A-Z_]+)\)", source)) | set(re.findall(r"Env\.([A-Z_]+)", source))
    assert read <= {e.name for e in Env}
    assert "env.get(" not in source.replace('env.get("HOME")', "").replace("env.get(name.value)", "").replace(
        "env.get(Env.TERMINATION_LOG.value)", ""), "the runner reads its settings only through _value"
