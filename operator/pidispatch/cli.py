"""The ``pidispatch`` command line (docs/cli.md): a stable interface; change it only additively.

Start-up cost matters (people type these; tests run them hundreds of times), so each command
imports what it needs inside its function: no kopf, no Kubernetes client on the store path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from pidispatch.contract import VENUE

CONFIG_ERROR = 2
_POSITIVE = re.compile(r"[1-9][0-9]*")


class UsageError(Exception):
    """Bad arguments or settings: one line on stderr, exit 2."""


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, separators=(", ", ": ")) + "\n")


def _settings(require_store: bool = True) -> Any:
    from pidispatch.settings import ConfigError, Settings

    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    if require_store and settings.sessions_dir is None:
        raise UsageError(
            "PI_SESSIONS_DIR is not set: point it at the session store directory (a private directory, mode 0700)"
        )
    return settings


def _key_arg(text: str) -> str:
    from pidispatch.store.keys import is_key

    if not is_key(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a session key (32 lowercase hex characters)")
    return text


def cmd_key(args: argparse.Namespace) -> int:
    from pidispatch.store.keys import branch_key, issue_key

    if not args.repo.strip():
        raise UsageError("--repo must not be empty (OWNER/NAME)")
    if args.issue is not None:
        if not _POSITIVE.fullmatch(args.issue.strip()):
            raise UsageError(f"--issue must be a positive whole number, not {args.issue!r}")
        key = issue_key(args.forge, args.repo, int(args.issue))
    else:
        if not args.branch:
            raise UsageError("--branch must not be empty")
        key = branch_key(args.forge, args.repo, args.branch)
    assert key is not None
    sys.stdout.write(key + "\n")
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    from pidispatch.store.resolve import resolve

    settings = _settings()
    result = resolve(settings, args.key, args.stage, venue=args.venue, pi_version=args.pi_version,
                     model=args.model)
    if result is None:  # a store fault, already logged: the job would run without a session
        _print_json({"resume": False, "reason": None, "bytes": None})
        return 1
    verdict = result.verdict
    _print_json({"resume": verdict.resume, "reason": verdict.reason, "bytes": verdict.bytes})
    return 0


def _context_arg(text: str) -> tuple[int, int]:
    fields = text.split()
    if len(fields) != 2 or not all(re.fullmatch(r"0|[1-9][0-9]*", f) for f in fields) or int(fields[1]) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not \"TOKENS WINDOW\" (whole numbers, window > 0)")
    return int(fields[0]), int(fields[1])


def cmd_promote(args: argparse.Namespace) -> int:
    from pidispatch.store.promote import promote

    settings = _settings()
    result = promote(settings, args.key, args.stage, host_resume=args.host_resume == "true",
                     venue=args.venue, pi_version=args.pi_version, model=args.model, context=args.context)
    _print_json({"promoted": result.promoted, "reason": result.reason, "bytes": result.bytes})
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    from pidispatch.store.reap import reap

    for event in reap(_settings()):
        _print_json(event)
    return 0


def _age(ms: float | None) -> str:
    if ms is None:
        return "-"
    seconds = max(0, int(ms // 1000))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n}B"


def _letter(letter: dict[str, Any] | None) -> str:
    """A waiting letter as the table shows it: who wrote it, from which job."""
    return f"waits ({letter['writer']}, {letter['job']})" if letter else "-"


def cmd_ledger(args: argparse.Namespace) -> int:
    """``pidispatch ledger KEY``: print the key's ledger (read without following a link)."""
    from pidispatch.store import agenttext, fsio, handoff, handoffdir

    settings = _settings()
    assert settings.sessions_dir is not None
    try:
        dir_fd = os.open(os.path.join(settings.sessions_dir, args.key), fsio.DIR_FLAGS)
    except OSError as exc:
        sys.stderr.write(f"pidispatch: key {args.key} has no directory in the store: {exc.strerror or exc}\n")
        return 1
    try:
        text = handoffdir.read_text(handoff.LEDGER, dir_fd, handoff.LEDGER_MAX_BYTES * 2)
        present = fsio.lstat_or_none(handoff.LEDGER, dir_fd) is not None
    finally:
        os.close(dir_fd)
    if text is None:
        sys.stderr.write(f"pidispatch: key {args.key} has no ledger\n" if not present else
                         f"pidispatch: the ledger of key {args.key} is not a regular UTF-8 file within "
                         f"{handoff.LEDGER_MAX_BYTES * 2} bytes; not printed\n")
        return 1
    sys.stdout.write(agenttext.printable(text))  # never a raw control byte to the terminal, whoever wrote the file
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from pidispatch.store.inspect import inspect_key, inspect_store

    settings = _settings()
    options = {"venue": args.venue, "pi_version": args.pi_version, "model": args.model}
    if args.key:
        rows = [inspect_key(settings, args.key, **options)]
    else:
        try:
            listing = inspect_store(settings, **options)
        except OSError as exc:
            sys.stderr.write(f"pidispatch: cannot list the session store {settings.sessions_dir}: "
                             f"{exc.strerror or exc}\n")
            return 1
        rows = list(listing)
    if args.json:
        for row in rows:
            _print_json(row)
        return 0
    header = ("KEY", "SIZE", "IDLE", "VENUE", "PI", "CHAIN", "CONTEXT", "LOCK", "LEDGER", "LETTER", "NEXT")
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        ctx = r.get("context")
        lock = r.get("lock")
        table.append((
            r["key"], _size(r.get("bytes")), _age(r.get("idleMs")), r.get("venue") or "-",
            r.get("piVersion") or "-", "-" if r.get("resumeChain") is None else str(r["resumeChain"]),
            f"{ctx['tokens']}/{ctx['window']}" if ctx else "-",
            f"{lock['state']} {_age(lock['ageMs'])}" if lock else "-",
            "-" if r.get("ledger") is None else str(r["ledger"]["entries"]),
            _letter((r.get("ledger") or {}).get("letter")), r["next"],
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for line in table:
        sys.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() + "\n")
    if not rows:
        sys.stdout.write("(the store holds no keys)\n")
    elif args.pi_version is None:
        sys.stdout.write("NEXT assumes the next job runs the pi version stamped on each key; "
                         "pass --pi-version to judge another.\n")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from pidispatch.transcript.parser import check_transcript

    try:
        with open(args.file, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from exc
    problems = check_transcript(data)
    for problem in problems:
        sys.stdout.write(f"{args.file}:{problem.line}: {problem.message}\n")
    return 1 if problems else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from pidispatch.doctor.edge import main as doctor_main
    from pidispatch.settings import ConfigError

    try:
        return doctor_main(args)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def cmd_operator(args: argparse.Namespace) -> int:
    from pidispatch.settings import ConfigError, OperatorSettings

    try:
        settings = OperatorSettings.from_env()
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    from pidispatch.handlers.main import run_operator

    return run_operator(settings, verbose=args.verbose)


def cmd_stop_jobs(args: argparse.Namespace) -> int:
    """The chart's pre-delete hook (not part of the stable interface of docs/cli.md)."""
    import os

    from pidispatch.kubeapi import Api
    from pidispatch.uninstall import stop_job_pods

    api = Api.from_environment()
    namespace = os.environ.get("PI_DISPATCH_NAMESPACE") or api.namespace_default()
    return stop_job_pods(api, namespace, args.deployment, args.timeout, release=args.release,
                         staging_claim=args.staging_claim)


def cmd_report(args: argparse.Namespace) -> int:
    """What each key's jobs cost, by how they started, from the SessionKeys of a namespace."""
    from kubernetes.config.config_exception import ConfigException

    from pidispatch.api.crds import GROUP, VERSION
    from pidispatch.costreport import report, table
    from pidispatch.kubeapi import Api, ApiError

    try:
        api = Api.from_environment(timeout=10, retries=0)
    except (ConfigException, OSError, ValueError) as exc:
        raise UsageError(f"no cluster to ask: not in a Pod, and no usable kubeconfig ({exc}); set KUBECONFIG "
                         "or run it in the operator's Pod (kubectl exec)") from None
    namespace = args.namespace or os.environ.get("PI_DISPATCH_NAMESPACE") or api.namespace_default()
    try:
        keys = api.list(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/sessionkeys")
    except ApiError as exc:
        why = {403: "forbidden: your credentials may not list sessionkeys.pi-dispatch.dev there",
               404: "not found: the pi-dispatch CRDs are not installed"}.get(exc.status, f"HTTP {exc.status}")
        sys.stderr.write(f"pidispatch report: cannot list the SessionKeys in namespace {namespace}: {why}. "
                         "Name the operator's namespace with --namespace, or check the chart is installed.\n")
        return 1
    data = report(keys)
    if args.output == "json":
        _print_json(data)
    else:
        sys.stdout.write(table(data))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """A Job for an issue or a pull request, made as the receiver makes one (``receiver/adhoc.py``)."""
    from pidispatch.receiver.adhoc_run import main as run_main

    try:
        return run_main(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _positive_arg(text: str) -> int:
    if not _POSITIVE.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def cmd_runner(args: argparse.Namespace) -> int:
    from pidispatch.runner.main import main as runner_main

    return runner_main(args)


def cmd_receiver_check(args: argparse.Namespace) -> int:
    from pidispatch.receiver.check import main as check_main

    return check_main(args.url)


def cmd_receiver(args: argparse.Namespace) -> int:
    from pidispatch.receiver.main import main as receiver_main

    return receiver_main(args)


def cmd_gateway(args: argparse.Namespace) -> int:
    from pidispatch.gateway.main import main as gateway_main

    return gateway_main(args)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``command``, only that command's arguments are added.

    Every command is listed either way (its name and help, so a typo or ``--help`` reads the same), but a
    command's start builds its own parser only, not the dozen others (docs/cli.md#start-up-cost). Each
    ``add_subparsers`` is given the ``prog`` argparse would work out with a help formatter (which imports
    ``shutil`` for the terminal's width).
    """

    def wanted(name: str) -> bool:
        return command is None or command == name

    parser = argparse.ArgumentParser(prog="pidispatch", description="pi-dispatch session store and operator.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", prog=parser.prog)

    key = commands.add_parser("key", help="print the session key of a repository branch or issue")
    if wanted("key"):
        key.add_argument("--forge", required=True, choices=("github", "gitlab", "forgejo", "azure"))
        key.add_argument("--repo", required=True, metavar="OWNER/NAME")
        which = key.add_mutually_exclusive_group(required=True)
        which.add_argument("--issue", metavar="N", help="issue number: the branch is pi/issue-N")
        which.add_argument("--branch", metavar="REF")
        key.set_defaults(run=cmd_key)

    store = commands.add_parser("store", help="act on the session store at PI_SESSIONS_DIR")
    if wanted("store"):
        _store_parsers(store)

    ledger = commands.add_parser("ledger", help="print a key's ledger: the durable facts its handoffs carried")
    if wanted("ledger"):
        ledger.add_argument("key", type=_key_arg)
        ledger.set_defaults(run=cmd_ledger)

    transcript = commands.add_parser("transcript", help="pi session files")
    if wanted("transcript"):
        transcript_commands = transcript.add_subparsers(dest="transcript_command", required=True, metavar="ACTION",
                                                        prog=transcript.prog)
        check = transcript_commands.add_parser("check", help="strict validation of a pi v3 session file")
        check.add_argument("file", metavar="FILE")
        check.set_defaults(run=cmd_check)

    doctor = commands.add_parser("doctor", help="check this deployment: store, bounds, CRDs, PVCs, RBAC")
    if wanted("doctor"):
        doctor.add_argument("--json", action="store_true", help="one JSON object per check")
        doctor.add_argument("--offline", action="store_true", help="skip the checks that need the cluster")
        doctor.set_defaults(run=cmd_doctor)

    op = commands.add_parser("operator", help="run the kopf operator (the container's entrypoint)")
    if wanted("operator"):
        op.add_argument("--verbose", action="store_true")
        op.set_defaults(run=cmd_operator)

    cost = commands.add_parser("report", help="per key: jobs and tokens per job, resumed, rethreaded or cold "
                                              "(the SessionKeys' status.usage)")
    if wanted("report"):
        cost.add_argument("--namespace", "-n", default=None,
                          help="the operator's namespace (default: PI_DISPATCH_NAMESPACE, else the kubeconfig's)")
        cost.add_argument("--output", "-o", choices=("table", "json"), default="table")
        cost.set_defaults(run=cmd_report)

    run = commands.add_parser("run", help="create a Job for an issue or a pull request, as the receiver would, "
                                          "and optionally wait for its end")
    if wanted("run"):
        run.add_argument("--trigger", required=True, metavar="NAME", help="the Trigger whose job this is")
        subject = run.add_mutually_exclusive_group(required=True)
        subject.add_argument("--issue", type=_positive_arg, metavar="N")
        subject.add_argument("--pull-request", type=_positive_arg, metavar="N")
        run.add_argument("--repo", default=None, metavar="OWNER/NAME",
                         help="default: the one repository the Trigger names")
        run.add_argument("--comment", default=None, metavar="TEXT", help="the text the job is given, as a comment's")
        run.add_argument("--namespace", "-n", default=None,
                         help="the operator's namespace (default: PI_DISPATCH_NAMESPACE, else the kubeconfig's)")
        run.add_argument("--token", default=None, help="a GitHub token that can read the repository "
                         "(default: GH_TOKEN, else GITHUB_TOKEN; prefer those: an argument shows in ps)")
        run.add_argument("--api-url", default=None, metavar="URL",
                         help="the forge's REST API (default: GITHUB_API_URL, else https://api.github.com)")
        run.add_argument("--wait", action="store_true", help="follow the Job to its end; the exit code says how")
        run.add_argument("--timeout", type=float, default=3600, metavar="SECONDS", help="with --wait (default 3600)")
        run.add_argument("--json", action="store_true", help="one JSON object: the namespace and the Jobs")
        run.set_defaults(run=cmd_run)

    runner = commands.add_parser("runner", help="the job image's side of the container contract: run pi")
    runner.set_defaults(run=cmd_runner)

    stop = commands.add_parser("stop-jobs", help="the chart's pre-delete hook: scale the operator to 0, delete "
                                                 "every job Pod of the release (none then holds the staging claim)")
    if wanted("stop-jobs"):
        stop.add_argument("--deployment", default=None, metavar="NAME", help="the operator's Deployment")
        stop.add_argument("--timeout", type=float, default=120, metavar="SECONDS", help="for each wait")
        stop.add_argument("--release", default=None, metavar="NAME",
                          help="delete only this Helm release's job Pods (unset: every job Pod of the namespace)")
        stop.add_argument("--staging-claim", default=None, metavar="NAME",
                          help="with --release: also the unlabelled job Pods (from before the label) mounting it")
        stop.set_defaults(run=cmd_stop_jobs)

    receiver = commands.add_parser("receiver", help="run the GitHub webhook receiver (creates Job CRs)")
    if wanted("receiver"):
        receiver.set_defaults(run=cmd_receiver)
        receiver_commands = receiver.add_subparsers(dest="receiver_command", metavar="check", prog=receiver.prog)
        receiver_check = receiver_commands.add_parser(
            "check", help="exit 0 when the webhook at URL refuses an unsigned delivery (401), as `helm test` checks")
        receiver_check.add_argument("url", metavar="URL", help="e.g. http://pi-dispatch-receiver.pi.svc/webhook")
        receiver_check.set_defaults(run=cmd_receiver_check)

    gateway = commands.add_parser("gateway", help="run the jobs' gateway: model keys added, usage counted, budget "
                                  "held (TLS; settings from PI_GATEWAY_*)")
    gateway.set_defaults(run=cmd_gateway)
    return parser


def _store_parsers(store: argparse.ArgumentParser) -> None:
    """``pidispatch store ACTION``'s four actions."""
    store_commands = store.add_subparsers(dest="store_command", required=True, metavar="ACTION", prog=store.prog)

    def job_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--venue", default=VENUE)
        p.add_argument("--pi-version", default=None)
        p.add_argument("--model", default=None, metavar="PROVIDER/MODEL")

    resolve = store_commands.add_parser("resolve", help="run the gates and stage DIR/current.jsonl")
    resolve.add_argument("--key", required=True, type=_key_arg)
    resolve.add_argument("--stage", required=True, metavar="DIR")
    job_options(resolve)
    resolve.set_defaults(run=cmd_resolve)

    promote = store_commands.add_parser("promote", help="promote DIR/current.jsonl into the store")
    promote.add_argument("--key", required=True, type=_key_arg)
    promote.add_argument("--stage", required=True, metavar="DIR")
    promote.add_argument("--host-resume", required=True, choices=("true", "false"))
    promote.add_argument("--context", type=_context_arg, default=None, metavar='"TOKENS WINDOW"')
    job_options(promote)
    promote.set_defaults(run=cmd_promote)

    reap = store_commands.add_parser("reap", help="one sweep of the TTL reaper")
    reap.set_defaults(run=cmd_reap)

    inspect = store_commands.add_parser("inspect", help="show the store, or one key")
    inspect.add_argument("key", nargs="?", type=_key_arg)
    inspect.add_argument("--json", action="store_true", help="one JSON object per key")
    job_options(inspect)
    inspect.set_defaults(run=cmd_inspect)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The top level takes no option with a value, so the first word that is not an option names the command.
    parser = build_parser(next((word for word in argv if not word.startswith("-")), None))
    args = parser.parse_args(argv)
    from pidispatch.events import log_to_stderr

    log_to_stderr()
    try:
        return int(args.run(args))
    except UsageError as exc:
        sys.stderr.write(f"pidispatch: {exc}\n")
        return CONFIG_ERROR


if __name__ == "__main__":
    sys.exit(main())
