"""``pidispatch run``'s I/O (docs/cli.md#pidispatch-run): the Trigger from the apiserver, the issue or pull request
and the token's login from the forge, the Jobs created as the receiver creates them, then (``--wait``) their ends.

The decisions are ``adhoc.py``'s and the receiver's pure core's; this module only reads, creates and waits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pidispatch.api.views import TriggerView
from pidispatch.api.vocabulary import GROUP, VERSION
from pidispatch.kubeapi import ApiError, KubeApi
from pidispatch.receiver import adhoc
from pidispatch.receiver.cluster import ApiCluster, ClusterUnavailable, JobRefused
from pidispatch.receiver.poll.forge import ForgeReader

DEFAULT_API_URL = "https://api.github.com"
WAIT_POLL_SECONDS = 2.0
TIMED_OUT = 4  # --wait: the Job had not ended within --timeout


def token_of(args: argparse.Namespace) -> str | None:
    """``--token``, else ``GH_TOKEN``, else ``GITHUB_TOKEN``: what ``gh`` reads."""
    return args.token or os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN") or None


def run(args: argparse.Namespace, api: KubeApi, namespace: str, reader: ForgeReader, *,
        sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> int:
    """Create the run's Jobs; print their names (or JSON); with ``args.wait``, follow them to their ends.

    Exit 0 when created (and, waiting, every Job Succeeded); 1 when refused (one line on stderr); waiting,
    the worst end: 1 a Job Failed, 3 one was Refused by the operator, 4 ``--timeout`` passed first."""
    try:
        jobs = create(args, api, namespace, reader)
    except adhoc.Refused as exc:
        sys.stderr.write(f"pidispatch run: {exc}\n")
        return 1
    result: dict[str, Any] = {"namespace": namespace, "jobs": [{"name": name} for name in jobs]}
    code = 0
    if args.wait:
        if not args.json:
            for name in jobs:
                sys.stdout.write(f"{name}\n")
            sys.stdout.flush()
        ends = wait(api, namespace, jobs, args.timeout, sleep=sleep, clock=clock)
        for entry in result["jobs"]:
            entry["phase"] = ends[entry["name"]]
        code = max((adhoc.TERMINAL.get(phase or "", TIMED_OUT) for phase in ends.values()), default=0)
        if args.json:
            sys.stdout.write(json.dumps(result) + "\n")
        else:
            for name, phase in ends.items():
                sys.stdout.write(f"{name} {phase or 'not ended (--timeout passed, or the Job was deleted)'}\n")
        return code
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        for name in jobs:
            sys.stdout.write(f"{name}\n")
    return code


def create(args: argparse.Namespace, api: KubeApi, namespace: str, reader: ForgeReader) -> list[str]:
    """The Jobs' names once created; :class:`adhoc.Refused` for whatever stops the run before or at the create."""
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}"
    try:
        found = api.get_or_none(f"{base}/triggers/{args.trigger}")
    except ApiError as exc:
        raise adhoc.Refused(f"cannot read Trigger {args.trigger} in namespace {namespace}: {_status(exc)}") from None
    trigger = TriggerView.of(found) if found is not None else None  # read once, here
    repository = args.repo or (adhoc.default_repository(trigger) if trigger is not None else None)
    if trigger is not None and repository is None:
        raise adhoc.Refused(f"Trigger {args.trigger} serves more than one repository: name one with --repo OWNER/NAME")
    problem = adhoc.trigger_problem(trigger, args.trigger, repository or "", namespace)
    if problem is not None:
        raise adhoc.Refused(problem)
    assert trigger is not None and repository is not None
    subject = adhoc.read_subject(reader, repository, issue=args.issue, pull_request=args.pull_request)
    sender = adhoc.requester(reader, subject.repository)
    planned = adhoc.plan(trigger, subject, sender, comment=args.comment)
    refused = [f"Job {job.name}: {job.problem}" for job in planned if job.body is None]
    if refused:
        raise adhoc.Refused("the API server would refuse " + "; ".join(refused))
    cluster = ApiCluster(api, namespace)  # type: ignore[arg-type]  # KubeApi: the calls ApiCluster makes

    async def create_all() -> list[str]:
        created = []
        for job in planned:
            assert job.body is not None
            if not await cluster.create_job(job.body):
                raise adhoc.Refused(f"Job {job.name} already exists")
            created.append(job.name)
        return created

    try:
        return asyncio.run(create_all())
    except (JobRefused, ClusterUnavailable) as exc:
        raise adhoc.Refused(str(exc)) from None


def wait(api: KubeApi, namespace: str, names: list[str], timeout: float, *,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
         ) -> dict[str, str | None]:
    """Each Job's terminal phase (:data:`adhoc.TERMINAL`), ``None`` for one not ended within ``timeout`` seconds."""
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/jobs"
    ends: dict[str, str | None] = dict.fromkeys(names)
    deadline = clock() + timeout
    while True:
        for name in names:
            if ends[name] is not None:
                continue
            try:
                job = api.get_or_none(f"{base}/{name}")
            except ApiError:
                continue  # the apiserver's blip: ask again on the next turn
            phase = ((job or {}).get("status") or {}).get("phase")
            if job is None:
                ends[name] = "Deleted"
            elif phase in adhoc.TERMINAL:
                ends[name] = phase
        if all(end is not None for end in ends.values()) or clock() >= deadline:
            return {name: (end if end != "Deleted" else None) for name, end in ends.items()}
        sleep(WAIT_POLL_SECONDS)


def _status(exc: ApiError) -> str:
    return {401: "unauthorized: your kubeconfig's credentials were refused",
            403: "forbidden: your credentials may not read pitriggers.pi-dispatch.dev there",
            404: "not found: the pi-dispatch CRDs are not installed"}.get(exc.status,
                                                                           f"HTTP {exc.status} {exc.message}")


def main(args: argparse.Namespace) -> int:
    """``pidispatch run``: the kube client and the forge reader from the environment, then :func:`run`."""
    from kubernetes.config.config_exception import ConfigException

    from pidispatch.kubeapi import Api

    token = token_of(args)
    if not token:
        raise ValueError("no forge token: set GH_TOKEN (or pass --token) to a token that can read the repository")
    try:
        api = Api.from_environment(timeout=10, retries=0)
    except (ConfigException, OSError, ValueError) as exc:
        raise ValueError(f"no cluster to ask: not in a Pod, and no usable kubeconfig ({exc}); set KUBECONFIG") \
            from None
    namespace = args.namespace or os.environ.get("PI_DISPATCH_NAMESPACE") or api.namespace_default()
    api_url = args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL
    reader = ForgeReader(api_url, lambda repository: f"Bearer {token}")
    return run(args, api, namespace, reader)
