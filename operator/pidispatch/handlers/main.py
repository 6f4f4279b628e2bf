"""``pidispatch operator``: configure logging and metrics, build the job flow's dispatcher, run kopf."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from pidispatch.settings import OperatorSettings

if TYPE_CHECKING:
    from pidispatch.doctor.check import Check
    from pidispatch.handlers.leadership import Leadership
    from pidispatch.kubeapi import Api


def run_operator(settings: OperatorSettings, verbose: bool = False) -> int:
    """Run until SIGTERM. Exit 2 when the cluster cannot be reached or the settings cannot work."""
    import kopf

    from pidispatch import metrics
    from pidispatch.events import log_services_as_json
    from pidispatch.handlers.register import register
    from pidispatch.jobflow.dispatcher import Dispatcher
    from pidispatch.jobflow.retention import Retention
    from pidispatch.kubeapi import Api

    log_services_as_json(logging.DEBUG if verbose else logging.INFO, quiet=("kopf.objects", "urllib3"))

    from pidispatch.forge.appauth import AppKeyError
    from pidispatch.forge.github import from_settings

    try:
        forge = from_settings(settings)  # reads the App's private key file: a bad one is a configuration error
    except AppKeyError as exc:
        print(f"pidispatch: {exc}", file=sys.stderr)
        return 2
    api = Api.from_environment()
    # Every write to the API server passes the fence first (a no-op until this replica leads): a replica
    # woken from a pause past its lease stops before it creates a Pod the new leader created already.
    from pidispatch.election import fence

    api.write_guard = fence.write_guard
    namespace = settings.namespace or api.namespace_default()
    refusals = claims_being_deleted(settings, api, namespace)
    if refusals:
        for check in refusals:
            print(f"pidispatch: refusing to start: {check.message}; fix: {check.fix}", file=sys.stderr)
        return 2
    dispatcher = Dispatcher(settings, api, namespace, forge)
    registry = kopf.OperatorRegistry()
    register(registry, dispatcher, Retention(settings, dispatcher.cluster), leadership(settings, namespace))
    metrics.serve(settings.metrics_port)
    from pidispatch.handlers.transfer import serve_transfer
    from pidispatch.transfer.server import TransferTLSError
    from pidispatch.transfer.token import TransferKeyError

    try:
        serve_transfer(settings)  # transfer mode only; every replica (handlers/transfer.py says why)
    except (TransferKeyError, TransferTLSError, OSError) as exc:
        print(f"pidispatch: the transfer server cannot start (sessions.staging.mode=transfer): {exc}",
              file=sys.stderr)
        return 2
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    # Standalone: which replica acts is the Lease's to say (leadership), not kopf's peering.
    kopf.run(registry=registry, namespaces=[namespace], standalone=True, liveness_endpoint=liveness)
    return 0


def leadership(settings: OperatorSettings, namespace: str) -> Leadership:
    """This replica's candidacy for the Lease ``PI_DISPATCH_LEASE``, identified by its Pod's name."""
    import os
    import socket

    from pidispatch.election.leader import LeaderElector, LeaseConfig
    from pidispatch.handlers.leadership import Leadership
    from pidispatch.kubeapi import Api

    identity = settings.pod_name or f"{socket.gethostname()}-{os.getpid()}"

    def lost() -> None:
        # The dispatcher's threads cannot be stopped half-way consistently; the next leader's journal
        # recovery handles what they leave, as after a crash. The Deployment restarts this container.
        logging.getLogger("pidispatch.operator").critical("leadership lost: exiting so that one replica acts")
        logging.shutdown()
        os._exit(3)

    config = LeaseConfig(namespace=namespace, name=settings.lease, identity=identity)
    # Its own client, each call bounded well inside the renew deadline: a renewal hanging on a partitioned
    # apiserver must not outlast the lease while a standby takes over.
    elector_api = Api.from_environment(timeout=config.retry_seconds, retries=0)
    elector = LeaderElector(elector_api, config)
    return Leadership(elector, on_lost=lost, fenced=True)


def claims_being_deleted(settings: OperatorSettings, api: Api, namespace: str) -> list[Check]:
    """The refusals (doctor's ``claims`` failures) for a staging or store claim that is being deleted:
    a Job staged into one would lose its copy with the claim, and its Pod could not mount it."""
    from pidispatch.doctor.cluster import terminating_claims
    from pidispatch.doctor.edge import gather_claims
    from pidispatch.kubeapi import ApiError

    try:
        pvcs, pods = gather_claims(api, settings, namespace)
    except ApiError as exc:  # a guard that cannot look must not keep the operator down; doctor says the same
        logging.getLogger("pidispatch.operator").warning("the claims could not be checked: %s", exc)
        return []
    return terminating_claims(pvcs, pods, namespace)
