"""What the runner reads from its environment: names, defaults, strict parsing (pure).

The operator sets these on the job Pod (`flow.pod_env`, `manifests.pod.job_pod`); the test harness sets
the overrides. Every malformed value is a configuration error: exit 2 and one line naming the variable
and the accepted form, before anything is spent (docs/conventions.md#errors-and-logs).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from pidispatch.contract import (
    ENV_CHECKOUT,
    ENV_COMMAND,
    ENV_COMMAND_EXTENSIONS_DIR,
    ENV_FLOW,
    ENV_HOST_RESUME,
    ENV_PREVIOUS_COMMIT,
    ENV_RETHREAD,
    ENV_RETHREAD_PCT,
    ENV_SESSION_FILE,
    ENV_SUBJECT,
    ENV_WORKSPACE_LIMIT,
    SUBJECT_BODY_LIMIT,
    SUBJECT_TITLE_LIMIT,
    TERMINATION_LOG,
    WORKSPACE,
    command_problem,
    flow_problem,
    is_commit,
)
from pidispatch.runner.checkout import CheckoutSpec
from pidispatch.store.handoff import LINEAGE_REASONS
from pidispatch.transfer import protocol as transfer_protocol


class Env(StrEnum):
    """Every variable the runner reads, defined once."""

    SESSION_FILE = ENV_SESSION_FILE  # set by the operator only when /session is mounted
    HOST_RESUME = ENV_HOST_RESUME  # "true" when the gates staged a transcript (docs/store-contract.md#operator-side)
    VERSION = "PI_VERSION"  # the pi version the Trigger declares (spec.run.piVersion)
    MODEL = "PI_MODEL"  # "provider/model", passed to pi as --model
    JOB_SPEC = "PI_JOB_SPEC"  # the Job CR's spec as JSON: the event facts the prompt is built from
    REPOSITORY = "PI_REPOSITORY"
    ISSUE = "PI_ISSUE"
    PULL_REQUEST = "PI_PULL_REQUEST"
    JOB_NAME = "PI_JOB_NAME"
    PI_BIN = "PI_BIN"  # the pi executable (default: `pi` on PATH)
    WORKSPACE = "PI_WORKSPACE"  # pi's working directory (default /workspace; tests override it)
    TERMINATION_LOG = "PI_TERMINATION_LOG"  # where the report goes (default /dev/termination-log)
    AGENT_DIR = "PI_CODING_AGENT_DIR"  # pi's own: where models.json lives (else ~/.pi/agent)
    CHECKOUT = ENV_CHECKOUT  # JSON {url, ref, sha, branch}: clone before pi starts (unset: no checkout)
    SUBJECT = ENV_SUBJECT  # JSON {title, body} of the issue or pull request (untrusted text)
    PREVIOUS_COMMIT = ENV_PREVIOUS_COMMIT  # JSON {sha, aheadBy, behindBy, status}: the branch moved
    RETHREAD_PCT = ENV_RETHREAD_PCT  # pack a handoff at or above this context use (%); 0 = never
    RETHREAD = ENV_RETHREAD  # the gate's lineage reason when a letter and the ledger are staged to unpack
    WORKSPACE_LIMIT = ENV_WORKSPACE_LIMIT  # bytes the checked-out files may take (the emptyDir's sizeLimit)
    FLOW = ENV_FLOW  # run.flow: the repository's .pi/skills/<flow> the prompt invokes (runner/flow.py)
    COMMAND = ENV_COMMAND  # run.command: the whole prompt, a command of the image's extensions (runner/command.py)
    COMMAND_EXTENSIONS_DIR = ENV_COMMAND_EXTENSIONS_DIR  # the image's: its trusted extensions (commands capability)
    # Staging by transfer (all four or none): this job's session URL, its token (by secretKeyRef), the CA file
    # the operator's certificate is checked against, and the cap on either direction.
    TRANSFER_URL = transfer_protocol.ENV_URL
    TRANSFER_TOKEN = transfer_protocol.ENV_TOKEN
    TRANSFER_CA_FILE = transfer_protocol.ENV_CA_FILE
    TRANSFER_MAX_BYTES = transfer_protocol.ENV_MAX_BYTES


class Exit(IntEnum):
    """The runner's exit codes: how the Pod's failure is read."""

    COMPLETED = 0
    INFRASTRUCTURE = 1  # pi failed (model down, crash): worth a retry; the report says outcome "failed"
    CONFIGURATION = 2  # the Pod, the mount or the image is wrong: a retry would fail the same way


DEFAULT_PI_BIN = "pi"
DEFAULT_RETHREAD_PCT = 70  # as the operator's PI_SESSION_RETHREAD_PCT default (settings.DEFAULT_RETHREAD_PCT)
_MODEL = re.compile(r"[^/\s]+/\S+")
_NUMBER = re.compile(r"[1-9][0-9]{0,17}")


class ConfigError(Exception):
    """A configuration error: the message is the one line the runner prints before exiting 2."""


@dataclass(frozen=True)
class Event:
    """The forge event the job answers, as far as the prompt needs it."""

    repository: str
    issue: int | None = None
    pull_request: int | None = None
    comment: str | None = None
    sender: str | None = None
    title: str | None = None  # the issue's or pull request's, from the forge API (untrusted)
    body: str | None = None
    checkout: CheckoutSpec | None = None  # what the workspace holds (None: no checkout)
    previous: Previous | None = None  # the conversation's last commit, when the checkout is another
    # A fork's pull request (the Job's spec.fork, which the operator sets when the forge API says so): the
    # job's token cannot push or write files (app), and the prompt says so.
    fork: bool = False
    # (i, n): the i-th of n independent attempts at this delivery (the Trigger's run.replicas), else None.
    replica: tuple[int, int] | None = None


@dataclass(frozen=True)
class Previous:
    """The commit a resumed conversation last saw, and how the checked-out one relates to it."""

    sha: str
    ahead_by: int | None = None
    behind_by: int | None = None
    status: str = "unknown"


@dataclass(frozen=True)
class Transfer:
    """Where the runner fetches the staged copy from and hands the result back to (transfer/protocol.py)."""

    url: str
    token: str = field(repr=False)  # never in a log line or a traceback's locals
    ca_file: str
    max_bytes: int


@dataclass(frozen=True)
class RunnerConfig:
    """The parsed environment."""

    event: Event
    session_file: str | None = None
    host_resume: bool = False
    pi_version: str | None = None
    model: str | None = None
    pi_bin: str = DEFAULT_PI_BIN
    workspace: str = WORKSPACE
    termination_log: str = TERMINATION_LOG
    agent_dir: str = ""
    job_name: str | None = None
    rethread_pct: int = 70
    unpack_reason: str | None = None  # set: a letter waits beside the empty session file (a lineage refusal)
    workspace_limit: int | None = None  # bytes a checkout may write (None: the Pod sets no limit)
    transfer: Transfer | None = None  # set: the session directory is filled and handed back over HTTPS
    flow: str | None = None  # run.flow: the skill of the checked-out commit the prompt invokes
    command: str | None = None  # run.command: '/<name> args', the whole prompt
    command_extensions_dir: str | None = None  # set with command: the image's extensions directory


def _json_object(env: Mapping[str, str], name: Env, what: str = "a JSON object") -> dict[str, Any] | None:
    raw = _value(env, name)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ConfigError(f"{name.value} is not valid: expected {what}")
    return data


def _replica(spec: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(replica, replicas)`` of the Job's spec when both are whole numbers with 1 <= i <= n <= 3, else None
    (the operator refused any other pair before the Pod existed)."""
    i, n = spec.get("replica"), spec.get("replicas")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (i, n)):
        return None
    assert isinstance(i, int) and isinstance(n, int)
    return (i, n) if 1 <= i <= n <= 3 else None


def _checkout(env: Mapping[str, str]) -> CheckoutSpec | None:
    raw = _value(env, Env.CHECKOUT)
    if raw is None:
        return None
    try:
        return CheckoutSpec.parse(raw)
    except ValueError as error:
        raise ConfigError(f"{Env.CHECKOUT.value} is not valid: {error}") from None


def _previous(env: Mapping[str, str]) -> Previous | None:
    data = _json_object(env, Env.PREVIOUS_COMMIT)
    if data is None:
        return None
    if not is_commit(data.get("sha")):
        raise ConfigError(f"{Env.PREVIOUS_COMMIT.value} is not valid: expected sha, a full commit id")

    def count(key: str) -> int | None:
        value = data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    status = data.get("status")
    return Previous(str(data["sha"]), count("aheadBy"), count("behindBy"),
                    status if status in ("ahead", "behind", "diverged", "identical") else "unknown")


def _subject(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    data = _json_object(env, Env.SUBJECT) or {}
    title, body = data.get("title"), data.get("body")
    return (title[:SUBJECT_TITLE_LIMIT] if isinstance(title, str) and title.strip() else None,
            body[:SUBJECT_BODY_LIMIT + 64] if isinstance(body, str) and body.strip() else None)


def _value(env: Mapping[str, str], name: Env) -> str | None:
    """The variable's value (trimmed); ``None`` when unset. An empty or blank value is a configuration
    error, never a silent "unset": the operator never sets one, so a manifest rendered it by mistake."""
    raw = env.get(name.value)
    if raw is None:
        return None
    if not raw.strip():
        raise ConfigError(f"{name.value} is set but empty: give it a value or unset it")
    return raw.strip()


def _number(env: Mapping[str, str], name: Env, spec_value: Any) -> int | None:
    if spec_value is not None:
        if isinstance(spec_value, bool) or not isinstance(spec_value, int) or spec_value < 1:
            raise ConfigError(f"{Env.JOB_SPEC.value} has an invalid {name.value.removeprefix('PI_').lower()} number "
                              f"{spec_value!r}: expected a positive whole number")
        return spec_value
    raw = _value(env, name)
    if raw is None:
        return None
    if not _NUMBER.fullmatch(raw):
        raise ConfigError(f"{name.value}={raw!r} is not valid: expected a positive whole number")
    return int(raw)


def _percent(env: Mapping[str, str], name: Env, default: int) -> int:
    """0..100 in canonical decimal (the operator's settings parse the same variable the same way)."""
    raw = _value(env, name)
    if raw is None:
        return default
    if not re.fullmatch(r"0|[1-9][0-9]?|100", raw):
        raise ConfigError(f"{name.value}={raw!r} is not valid: expected an integer from 0 (no handoff) to 100")
    return int(raw)


def _flag(env: Mapping[str, str], name: Env) -> bool:
    raw = _value(env, name)
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    raise ConfigError(f"{name.value}={raw!r} is not valid: expected true or false (unset means false)")


def _agent_dir(env: Mapping[str, str]) -> str:
    """pi's agent directory: `$PI_CODING_AGENT_DIR` (leading ~ expanded) else `~/.pi/agent`
    (docs/pi-behaviour.md#where-pi-reads-and-writes)."""
    home = env.get("HOME") or os.path.expanduser("~")
    configured = _value(env, Env.AGENT_DIR)
    if configured is None:
        return os.path.join(home, ".pi", "agent")
    if configured == "~" or configured.startswith("~/"):
        return home + configured[1:]
    return configured


def _job_spec(env: Mapping[str, str]) -> dict[str, Any]:
    return _json_object(env, Env.JOB_SPEC, "the Job's spec as a JSON object") or {}


def _text(spec: Mapping[str, Any], name: str) -> str | None:
    value = spec.get(name)
    return value if isinstance(value, str) and value.strip() else None


def _transfer(env: Mapping[str, str], session_file: str | None) -> Transfer | None:
    """The four transfer variables, all or none; the URL https only (TLS is never off)."""
    names = (Env.TRANSFER_URL, Env.TRANSFER_TOKEN, Env.TRANSFER_CA_FILE, Env.TRANSFER_MAX_BYTES)
    values = {name: _value(env, name) for name in names}
    if all(value is None for value in values.values()):
        return None
    missing = [name.value for name, value in values.items() if value is None]
    if missing:
        raise ConfigError(f"staging by transfer needs {', '.join(n.value for n in names)}; {', '.join(missing)} "
                          "not set: the operator sets all four in transfer mode")
    url, token, ca_file = values[Env.TRANSFER_URL], values[Env.TRANSFER_TOKEN], values[Env.TRANSFER_CA_FILE]
    assert url is not None and token is not None and ca_file is not None
    if not url.startswith("https://"):
        raise ConfigError(f"{Env.TRANSFER_URL.value}={url!r} is not valid: expected an https:// URL (TLS is never off)")
    if not os.path.isabs(ca_file):
        raise ConfigError(f"{Env.TRANSFER_CA_FILE.value}={ca_file!r} is not valid: expected an absolute path")
    max_bytes = _number(env, Env.TRANSFER_MAX_BYTES, None)
    assert max_bytes is not None
    if session_file is None:
        raise ConfigError(f"{Env.TRANSFER_URL.value} is set without {Env.SESSION_FILE.value}: a transferred "
                          "session needs the file pi resumes")
    return Transfer(url, token, ca_file, max_bytes)


def _command(env: Mapping[str, str], flow: str | None) -> tuple[str | None, str | None]:
    """``PI_COMMAND`` and the image's extensions directory, or ``(None, None)``; refused without the image's
    declaration (the commands capability), beside a flow, or in a form pi would not run as a command."""
    command = _value(env, Env.COMMAND)
    if command is None:
        return None, None
    if flow is not None:
        raise ConfigError(f"{Env.COMMAND.value} and {Env.FLOW.value} are both set: a job runs a flow or a command, "
                          "not both (the Trigger's run.flow and run.command); keep one")
    why = command_problem(command)
    if why is not None:
        raise ConfigError(f"{Env.COMMAND.value}: {why}")
    extensions = _value(env, Env.COMMAND_EXTENSIONS_DIR)
    if extensions is None:
        raise ConfigError(f"{Env.COMMAND.value}={command.split(' ', 1)[0]} needs a job image that runs commands, and "
                          f"this one does not declare it ({Env.COMMAND_EXTENSIONS_DIR.value} is not set): build the "
                          f"image with {Env.COMMAND_EXTENSIONS_DIR.value} naming a directory of the pi extensions "
                          "that register the command, or remove run.command from the Trigger")
    if not os.path.isabs(extensions):
        raise ConfigError(f"{Env.COMMAND_EXTENSIONS_DIR.value}={extensions!r} is not valid: expected an absolute "
                          "path, e.g. /opt/pi-dispatch/extensions")
    return command, os.path.normpath(extensions)


def load_config(env: Mapping[str, str]) -> RunnerConfig:
    """Parse the runner's environment; raise `ConfigError` (one line) on anything unusable.

    `PI_JOB_SPEC` is the source of the event facts; `PI_REPOSITORY`, `PI_ISSUE` and `PI_PULL_REQUEST`
    fill in what it lacks (the operator sets both, from the same spec). A job needs a repository: without
    one there is nothing to tell the agent to work on.
    """
    for name in Env:  # an empty value of any of them is refused, whether or not this run needs it
        _value(env, name)
    spec = _job_spec(env)
    repository = _text(spec, "repository") or _value(env, Env.REPOSITORY)
    if repository is None:
        raise ConfigError(f"{Env.REPOSITORY.value} is not set (nor repository in {Env.JOB_SPEC.value}): "
                          "expected OWNER/NAME of the repository the job works on")
    issue = _number(env, Env.ISSUE, spec.get("issue"))
    pull_request = _number(env, Env.PULL_REQUEST, spec.get("pullRequest"))
    if issue is not None and pull_request is not None:
        raise ConfigError(f"the job names both an issue ({issue}) and a pull request ({pull_request}): "
                          f"expected at most one of {Env.ISSUE.value} / {Env.PULL_REQUEST.value}")
    title, body = _subject(env)
    event = Event(repository=repository, issue=issue, pull_request=pull_request,
                  comment=spec.get("comment") if isinstance(spec.get("comment"), str) else None,
                  sender=_text(spec, "sender"), title=title, body=body, checkout=_checkout(env),
                  previous=_previous(env), fork=spec.get("fork") is True and pull_request is not None,
                  replica=_replica(spec))

    model = _value(env, Env.MODEL)
    if model is not None and not _MODEL.fullmatch(model):
        raise ConfigError(f"{Env.MODEL.value}={model!r} is not valid: expected provider/model, e.g. fake/fake-model")
    session_file = _value(env, Env.SESSION_FILE)
    if session_file is not None and not os.path.isabs(session_file):
        # pi reads a --session argument without a slash as a session-id prefix (docs/pi-behaviour.md#resume).
        raise ConfigError(f"{Env.SESSION_FILE.value}={session_file!r} is not valid: expected an absolute path, "
                          "e.g. /session/current.jsonl")
    workspace = _value(env, Env.WORKSPACE) or WORKSPACE
    if not os.path.isabs(workspace):
        raise ConfigError(f"{Env.WORKSPACE.value}={workspace!r} is not valid: expected an absolute path")
    rethread_pct = _percent(env, Env.RETHREAD_PCT, DEFAULT_RETHREAD_PCT)
    unpack_reason = _value(env, Env.RETHREAD)
    if unpack_reason is not None and unpack_reason not in LINEAGE_REASONS:
        raise ConfigError(f"{Env.RETHREAD.value}={unpack_reason!r} is not valid: expected one of "
                          f"{', '.join(sorted(LINEAGE_REASONS))}")
    flow = _value(env, Env.FLOW)
    command, extensions = _command(env, flow)
    if flow is not None:
        why = flow_problem(flow)
        if why is not None:
            raise ConfigError(f"{Env.FLOW.value}: {why}")
        if event.checkout is None:
            raise ConfigError(f"{Env.FLOW.value}={flow} needs the workspace: a flow is read from the checked-out "
                              f"commit's .pi/skills/{flow}, and {Env.CHECKOUT.value} is not set")
    return RunnerConfig(
        flow=flow,
        command=command,
        command_extensions_dir=extensions,
        workspace_limit=_number(env, Env.WORKSPACE_LIMIT, None),
        rethread_pct=rethread_pct,
        unpack_reason=unpack_reason,
        event=event,
        session_file=session_file,
        host_resume=_flag(env, Env.HOST_RESUME),
        pi_version=_value(env, Env.VERSION),
        model=model,
        pi_bin=_value(env, Env.PI_BIN) or DEFAULT_PI_BIN,
        workspace=os.path.normpath(workspace),
        termination_log=_value(env, Env.TERMINATION_LOG) or TERMINATION_LOG,
        agent_dir=_agent_dir(env),
        job_name=_value(env, Env.JOB_NAME),
        transfer=_transfer(env, session_file),
    )
