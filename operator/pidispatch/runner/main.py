"""`pidispatch runner`: the thin shell that runs the contract's steps in order
(docs/architecture.md#container-contract).

0. make the runner non-dumpable (`undumpable`), so the agent, same uid, cannot read the runner's own
   secrets through /proc or ptrace: impossible while holding one → exit 2;
1. parse the environment (`config`);                          configuration error → exit 2
   in transfer mode, fetch the staged copy into the session directory (`transfer`):
   refused by the operator → exit 2, unreachable after retries → exit 1;
2. mount readiness, when `PI_SESSION_FILE` is set (`mount`);    → exit 2, pi never started
3. the workspace exists (created when missing);                 → exit 2
4. `pi --version` is the declared `PI_VERSION` (`version`);     → exit 2
5. the workspace is cloned at the operator's commit, when `PI_CHECKOUT` names one (`checkout`):
   a commit that is gone or a refused token → exit 2, a fault after retries → exit 1;
   with `PI_FLOW`, the flow's skill is copied out of the default branch's commit the operator named
   (`flow`): missing, a link, no such commit named, a fork's pull request → exit 2, pi never started;
   with `PI_COMMAND`, the image's extensions must register the command (`command`) → else exit 2, pi
   never runs the job;
6. make the session file safe for pi (`session`): keep, repair or quarantine — never an exit code;
7. run pi (`pi`);                                              pi's non-zero exit → exit 1
8. measure context and this run's token use on the final file (a job without a session: on a scratch file
   pi wrote instead of keeping the session in memory, removed once read), note the workspace's HEAD and what
   was pushed; in transfer mode, after a successful run, hand the session back (`transfer`): a failed
   upload → exit 1 (the operator promotes nothing); write the report (`report`).

Every path writes a report; the refusals of steps 1–4 write `{"outcome": "refused"}` (plus the pi
version when it was read) and no `session`, so the operator's record falls back to the host's verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

from pidispatch.contract import ENV_SECRET_NAMES, FORGE_TOKEN_NAMES, TERMINATION_LOG
from pidispatch.contract.digests import MAX_SECRETS, SecretDigest, digest_of
from pidispatch.contract.report import Rethread, RunnerReport, Workspace
from pidispatch.events import emit, log_to_stderr
from pidispatch.record import RunnerSession
from pidispatch.runner import rethread
from pidispatch.runner.checkout import CheckoutError, agent_git_env, check_out, fetch_commit, final_state
from pidispatch.runner.command import Command, CommandError, command_env, command_of
from pidispatch.runner.config import ConfigError, Env, Exit, RunnerConfig, load_config
from pidispatch.runner.flow import Flow, FlowError, materialise
from pidispatch.runner.gateway import GatewayConfigError, through_gateway
from pidispatch.runner.mount import gather_mount_facts, mount_problem
from pidispatch.runner.pi import pi_command, pi_env, read_pi_version, run_pi
from pidispatch.runner.prompt import build_prompt, first_prompt, target_of
from pidispatch.runner.report import Usage, measure_context, new_usage, priced_models
from pidispatch.runner.runsecrets import run_secret_values
from pidispatch.runner.session import OpenedSession, disabled_session, open_session, read_final
from pidispatch.runner.transfer import TransferFailed, fetch_staged, hand_back
from pidispatch.runner.undumpable import protect
from pidispatch.runner.version import VersionError, version_problem
from pidispatch.transfer.protocol import ENV_TOKEN as TRANSFER_TOKEN

MODELS_JSON = "models.json"
MODELS_JSON_LIMIT = 4 * 1024 * 1024


class Refused(Exception):
    """A configuration error found before pi starts; `pi_version` is set once it was read."""

    def __init__(self, message: str, pi_version: str | None = None) -> None:
        super().__init__(message)
        self.pi_version = pi_version


def own_secrets(env: Mapping[str, str]) -> tuple[SecretDigest, ...]:
    """The digests of the job's own secrets (its forge token, its model keys, its run.secrets), for the
    operator's scan before the promotion: lengths and SHA-256 only, never a value, and none of a value too
    short to be safe (``store/redact.py``)."""
    names = [*FORGE_TOKEN_NAMES, TRANSFER_TOKEN, *(env.get(ENV_SECRET_NAMES) or "").split(",")]
    values: list[str | bytes] = [env[name] for name in dict.fromkeys(names) if name and env.get(name)]
    values += run_secret_values(env)  # run.secrets, read from their mounts (runner/runsecrets.py)
    found = (digest_of(value) for value in values)
    return tuple(dict.fromkeys(d for d in found if d is not None))[:MAX_SECRETS]


def deliver(report: RunnerReport, termination_log: str) -> str:
    """Write the report to the termination message file and as the last stdout line; return the text.

    Every report carries the digests of the job's own secrets (``own_secrets``)."""
    text = replace(report, secrets=own_secrets(os.environ)).to_message()
    try:
        with open(termination_log, "w", encoding="utf-8") as sink:
            sink.write(text)
    except OSError as error:
        emit("runner_report_unwritten", path=termination_log, reason=error.strerror or str(error))
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return text


def load_models(agent_dir: str) -> Any:
    """pi's models.json from the agent dir, parsed; None when it is missing or unreadable."""
    try:
        with open(os.path.join(agent_dir, MODELS_JSON), "rb") as source:
            return json.loads(source.read(MODELS_JSON_LIMIT))
    except (OSError, ValueError, RecursionError):
        return None


def prepare(config: RunnerConfig, env: Mapping[str, str]) -> str:
    """Steps 2–4: refuse (raise `Refused`) before anything is spent; return the pi version read."""
    if config.session_file is not None:
        problem = mount_problem(gather_mount_facts(config.session_file))
        if problem is not None:
            raise Refused(problem)
    try:
        os.makedirs(config.workspace, exist_ok=True)
    except OSError as error:
        raise Refused(f"cannot create the workspace {config.workspace} ({Env.WORKSPACE.value}): "
                      f"{error.strerror or error}") from error
    try:
        version = read_pi_version(config.pi_bin, env)
    except VersionError as error:
        raise Refused(str(error)) from error
    problem = version_problem(config.pi_version, version, config.pi_bin)
    if problem is not None:
        raise Refused(problem, version)
    assert version is not None  # version_problem refuses an unreadable version
    return version


def untrusted(config: RunnerConfig) -> bool:
    """A fork's pull request, by the operator's word (``spec.fork``) or by its read-only checkout."""
    return config.event.fork or (config.event.checkout is not None and config.event.checkout.branch is None)


def clone(config: RunnerConfig, env: Mapping[str, str]) -> None:
    """Step 5: the workspace at the operator's commit (``checkout``), when the Pod names one."""
    spec = config.event.checkout
    if spec is None:
        return
    began = time.monotonic()
    result = check_out(spec, config.workspace, env, size_limit=config.workspace_limit, fork=untrusted(config))
    emit("workspace_checked_out", job=config.job_name, ref=spec.ref, sha=result.head,
         seconds=round(time.monotonic() - began, 3))


def workspace_report(config: RunnerConfig, env: Mapping[str, str]) -> Workspace | None:
    """Where the run left the workspace: its HEAD and what it pushed (a checkout's jobs only)."""
    spec = config.event.checkout
    if spec is None:
        return None
    try:
        head, pushed = final_state(config.workspace, spec.branch, env)
    except (OSError, subprocess.SubprocessError) as error:
        emit("workspace_unread", reason=f"{type(error).__name__}: {error}")
        return None
    return Workspace(head=head, pushed=pushed)


def _first_prompt(config: RunnerConfig, env: Mapping[str, str], opened: OpenedSession
                  ) -> tuple[str, rethread.Unpack | None]:
    """The prompt pi starts with: the unpack of a staged handoff, the resume envelope, or the full briefing."""
    if config.unpack_reason is None or opened.session_file is None or opened.resumed:
        return build_prompt(config.event, host_resume=config.host_resume), None
    unpack = rethread.read_unpack(opened.session_file)
    if unpack is None or not rethread.new_session_header(opened.session_file, config.workspace, unpack.parent):
        emit("rethread_unpack_skipped", reason="no letter staged, or the session file was not empty")
        return first_prompt(config.event), None
    commit = config.event.checkout.sha if config.event.checkout is not None else None
    text = rethread.template("unpack", config.workspace, commit, env)
    emit("rethread_unpacked", job=config.job_name, reason=config.unpack_reason, parent=unpack.parent)
    return rethread.unpack_prompt(unpack, target=target_of(config.event), reason=config.unpack_reason,
                                  event_prompt=first_prompt(config.event), text=text), unpack


def _measure(config: RunnerConfig, opened: OpenedSession, scratch: str | None = None
             ) -> tuple[bytes | None, Usage | None, tuple[int, int] | None]:
    """The file pi left, this run's usage and the context it ends on; a scratch file gives the usage only."""
    models = load_models(config.agent_dir)
    if opened.session_file is None:
        final = read_final(scratch) if scratch is not None else None
        return None, (new_usage(final, frozenset(), priced_models(models)) if final is not None else None), None
    final = read_final(opened.session_file)
    if final is None:
        return None, None, None
    context = measure_context(final, config.model, models)
    return final, new_usage(final, opened.entry_ids, priced_models(models)), context


@contextmanager
def scratch_session(opened: OpenedSession) -> Iterator[str | None]:
    """A private file for pi to write a job without a session to, so its usage can be read: ``None`` when the
    job has a session (pi writes that) or no private directory could be made (pi then runs with --no-session
    and the report has no tokens). Removed when the run is measured: it is this job's conversation, nobody
    else's, and nothing keeps it."""
    if opened.session_file is not None:
        yield None
        return
    try:
        directory = tempfile.mkdtemp(prefix="pi-usage-")  # mode 0700
    except OSError as error:
        emit("runner_usage_unmeasured", reason=error.strerror or str(error))
        yield None
        return
    try:
        yield os.path.join(directory, "run.jsonl")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _after_first_reply(final: bytes, config: RunnerConfig) -> tuple[int, int] | None:
    """The context right after the first assistant reply: an unpack's cost before any new work."""
    end = 0
    for line in final.split(b"\n"):
        end += len(line) + 1
        if b'"role":"assistant"' in line:
            return measure_context(final[:end], config.model, load_models(config.agent_dir))
    return None


def _pack(config: RunnerConfig, env: Mapping[str, str], opened: OpenedSession, final: bytes | None,
          context: tuple[int, int] | None, unpack: rethread.Unpack | None) -> tuple[Rethread | None, Usage | None]:
    """The pack turn when the conversation reached the bound: the report's ``rethread`` part (or None), and
    the usage of the summary side call when one ran (its replies are not in the job's session file)."""
    fork = untrusted(config)
    if opened.session_file is None or fork or not rethread.should_pack(config.rethread_pct, context):
        return (Rethread(unpacked=True) if unpack is not None else None), None
    if unpack is not None and final is not None and rethread.should_pack(config.rethread_pct,
                                                                        _after_first_reply(final, config)):
        # Over the bound already with the letter alone: packing would only copy the handoff forward.
        emit("rethread_pack_skipped", reason="over the bound right after the unpack")
        return Rethread(unpacked=True, packed=None, detail="over the bound right after the unpack"), None
    assert context is not None
    pct = context[0] * 100 // context[1]
    commit = config.event.checkout.sha if config.event.checkout is not None else None
    began = time.monotonic()
    packed = rethread.pack(pi_bin=config.pi_bin, session_file=opened.session_file, model=config.model,
                           workspace=config.workspace, env=env, pct=pct, read_final=read_final,
                           pack_text=rethread.template("pack", config.workspace, commit, env),
                           summary_text=rethread.template("summary", config.workspace, commit, env))
    emit("rethread_packed", job=config.job_name, writer=packed.writer, detail=packed.detail, contextPct=pct,
         seconds=round(time.monotonic() - began, 3))
    side = None
    if packed.side_call is not None:
        side = new_usage(packed.side_call, frozenset(), priced_models(load_models(config.agent_dir)))
    # A detail, '' when the pack said nothing: the report then says who packed even when nobody could.
    return Rethread(unpacked=unpack is not None, packed=packed.writer, detail=(packed.detail or "")[:200]), side


@contextmanager
def flow_of(config: RunnerConfig, env: Mapping[str, str]) -> Iterator[Flow | None]:
    """The Trigger's flow copied out of the default branch's commit the operator named (never the checked-out
    one, unless they are the same) into a private directory (removed after the run), or ``None`` without
    ``PI_FLOW``. Raises :class:`FlowError` (the runner refuses: exit 2)."""
    if config.flow is None:
        yield None
        return
    spec = config.event.checkout
    assert spec is not None  # load_config refuses a flow without a checkout
    if untrusted(config):
        raise FlowError(f"run.flow ({config.flow}) never runs on a fork's pull request: its .pi/skills is "
                        "anyone's text, and a flow is the job's instructions")
    source = spec.flow
    if source is None:
        raise FlowError(f"run.flow ({config.flow}): PI_CHECKOUT names no commit to read the flow from (the "
                        "default branch's, which the operator resolves); a flow is never read from the checked-out "
                        "commit. Run an operator of the same release as the job image")
    directory = tempfile.mkdtemp(prefix="pi-flow-")  # mode 0700, outside the workspace
    try:
        repository = config.workspace
        if source.sha != spec.sha:
            repository = os.path.join(directory, ".git-flow")  # beside the copy, removed with it
            try:
                fetch_commit(spec.url, source.sha, repository, env)
            except CheckoutError as error:
                raise FlowError(f"run.flow ({config.flow}): {source.ref} (commit {source.sha[:12]}) could not be "
                                f"fetched ({error.failure}: {error.detail})") from None
        flow = materialise(repository, source.sha, config.flow, directory, env, ref=source.ref)
        if repository != config.workspace:
            shutil.rmtree(repository, ignore_errors=True)
        emit("flow_loaded", job=config.job_name, flow=flow.name, sha=source.sha, ref=source.ref)
        yield flow
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def execute(config: RunnerConfig, env: Mapping[str, str], version: str,
            opened: OpenedSession, flow: Flow | None = None, command: Command | None = None
            ) -> tuple[RunnerReport, int]:
    """Steps 7–8: run pi on the prepared session (then the pack turn, at the bound) and build the report."""
    if command is not None:  # the whole prompt: the event reaches the handler in its file, not as a briefing
        prompt, unpack = command.text, None
    else:
        prompt, unpack = _first_prompt(config, env, opened)
        if flow is not None:
            prompt = flow.prompt(prompt)
    emit("runner_started", job=config.job_name, hostResume=config.host_resume, resumed=opened.resumed,
         reason=opened.reason.value, piVersion=version, inMemory=opened.session_file is None,
         rethread=unpack is not None)
    fork = untrusted(config)
    agent_env = agent_git_env(env, config.workspace)
    with scratch_session(opened) as scratch:
        run = run_pi(pi_command(config.pi_bin, opened.session_file or scratch, config.model, prompt,
                                untrusted_workspace=fork, skills=(flow.directory,) if flow is not None else (),
                                extensions=command.extensions if command is not None else ()),
                     config.workspace, command_env(agent_env, command),
                     watch=command.failure if command is not None else None)
        final, usage, context = _measure(config, opened, scratch)
    part = side = None
    if run.said:  # a command's handler threw: pi said so and exited 0 (runner/command.py)
        emit("command_failed", job=config.job_name, command=command.name if command is not None else None)
    if run.signalled is None and run.exit_code == 0 and not run.said:
        part, side = _pack(config, agent_env, opened, final, context, unpack)
        if part is not None:  # a pack turn, answered or not, is part of the run and its cost (read again)
            final, usage, context = _measure(config, opened)
        if side is not None:  # so is the summary call, in a file of its own
            usage = side if usage is None else usage.plus(side)
    if opened.session_file is not None and not (part is not None and part.packed):
        rethread.discard_handoff(opened.session_file)  # only the runner's pack writes a handoff
    elif unpack is not None:
        part = Rethread(unpacked=True)
    if run.signalled is not None:
        outcome, code = "aborted", 128 + run.signalled
    elif run.exit_code == 0 and not run.said:
        outcome, code = "completed", Exit.COMPLETED
    else:
        outcome, code = "failed", Exit.INFRASTRUCTURE
    report = RunnerReport(session=RunnerSession(opened.resumed, opened.reason.value), context=context,
                          tokens=usage.as_tokens() if usage is not None else {}, pi_version=version,
                          outcome=outcome, workspace=workspace_report(config, env), rethread=part)
    return report, int(code)


def run(env: Mapping[str, str]) -> int:
    """The whole contract for one job; returns the exit code."""
    try:
        config = load_config(env)
    except ConfigError as error:
        return refuse(str(error), env.get(Env.TERMINATION_LOG.value) or TERMINATION_LOG, None)
    try:  # the job's processes reach out through the gateway only (docs/gateway.md#inside-the-job)
        env = through_gateway(env, lambda: tempfile.mkdtemp(prefix="pidispatch-gateway-"))
    except (GatewayConfigError, OSError) as error:
        return refuse(str(error), config.termination_log, None)
    pienv = pi_env(env)
    if config.transfer is not None and config.session_file is not None:
        try:
            fetch_staged(config.transfer, os.path.dirname(config.session_file))
        except TransferFailed as error:
            return transfer_refused(str(error), config.termination_log, final=error.final)
    try:
        version = prepare(config, pienv)
    except Refused as error:
        return refuse(str(error), config.termination_log, error.pi_version)
    try:
        clone(config, pienv)
    except CheckoutError as error:
        return refuse_checkout(error, config.termination_log, version)
    with ExitStack() as scope:
        try:
            flow = scope.enter_context(flow_of(config, pienv))
        except FlowError as error:
            emit("flow_refused", job=config.job_name, flow=config.flow, reason=str(error))
            return refuse(str(error), config.termination_log, version)
        try:
            command = scope.enter_context(command_of(config, pienv))
        except CommandError as error:
            emit("command_refused", job=config.job_name, command=config.command, reason=str(error))
            return refuse(str(error), config.termination_log, version)
        report, code = run_pi_step(config, pienv, version, flow, command)
    if code == Exit.COMPLETED and config.transfer is not None and config.session_file is not None:
        try:
            hand_back(config.transfer, os.path.dirname(config.session_file))
        except TransferFailed as error:
            sys.stderr.write(f"pidispatch runner: {error}. The job fails and the operator promotes nothing: "
                             "re-create the Job once the operator is reachable (or the session under its cap)\n")
            sys.stderr.flush()
            emit("transfer_failed", direction="upload", reason=str(error))
            report = replace(report, outcome="failed")
            code = int(Exit.INFRASTRUCTURE)
    deliver(report, config.termination_log)
    emit("exit", exitCode=code, **report.to_json())
    return code


def run_pi_step(config: RunnerConfig, env: Mapping[str, str], version: str,
                flow: Flow | None, command: Command | None = None) -> tuple[RunnerReport, int]:
    """Steps 6–8, any fault after the checks still reported (as infrastructure)."""
    opened = disabled_session()
    try:
        if config.session_file is not None:
            opened = open_session(config.session_file, config.workspace)
        return execute(config, env, version, opened, flow, command)
    except Exception as error:  # a runner fault after the checks: still report, as infrastructure
        emit("runner_failed", reason=f"{type(error).__name__}: {error}")
        return (RunnerReport(session=RunnerSession(opened.resumed, opened.reason.value), pi_version=version,
                             outcome="failed"), int(Exit.INFRASTRUCTURE))


def refuse_checkout(error: CheckoutError, termination_log: str, pi_version: str) -> int:
    """The workspace could not be cloned: pi never starts; the report names the closed failure."""
    sys.stderr.write(f"pidispatch runner: the workspace could not be checked out ({error.failure}): "
                     f"{error.detail}\n")
    sys.stderr.flush()
    emit("workspace_checkout_failed", failure=error.failure, detail=error.detail)
    deliver(RunnerReport(pi_version=pi_version, outcome="failed",
                         workspace=Workspace(failure=error.failure, detail=error.detail)), termination_log)
    # A commit that is gone or a refused token fails the same way again: configuration, not infrastructure.
    return int(Exit.INFRASTRUCTURE if error.failure == "failed" else Exit.CONFIGURATION)


def transfer_refused(message: str, termination_log: str, *, final: bool) -> int:
    """The staged copy did not arrive: pi never starts. Refused by the operator (a token or uid it does not
    accept) → exit 2; unreachable after retries → exit 1 (``failed``)."""
    sys.stderr.write(f"pidispatch runner: {message}; pi was not started\n")
    sys.stderr.flush()
    emit("transfer_failed", direction="fetch", reason=message)
    deliver(RunnerReport(outcome="refused" if final else "failed"), termination_log)
    return int(Exit.CONFIGURATION if final else Exit.INFRASTRUCTURE)


def refuse(message: str, termination_log: str, pi_version: str | None) -> int:
    """A configuration error: one line on stderr, a `refused` report, exit 2."""
    sys.stderr.write(f"pidispatch runner: {message}\n")
    sys.stderr.flush()
    deliver(RunnerReport(pi_version=pi_version, outcome="refused"), termination_log)
    return int(Exit.CONFIGURATION)


def main(args: argparse.Namespace | None = None) -> int:
    """Entry point of `pidispatch runner` (no options: everything comes from the environment)."""
    del args
    log_to_stderr()
    # First, before any thread or child: the agent runs as our uid, and must not read our secrets out of
    # /proc/<pid>/environ or our memory (runner/undumpable.py).
    refusal = protect(os.environ)
    if refusal is not None:
        return refuse(refusal, os.environ.get(Env.TERMINATION_LOG.value) or TERMINATION_LOG, None)
    return run(os.environ)
