"""``pidispatch operator``: configure logging and metrics, build the job flow's dispatcher, run kopf."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from pidispatch.settings import OperatorSettings

if TYPE_CHECKING:
    from pidispatch.doctor import Check
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
    namespace = settings.namespace or api.namespace_default()
    refusals = claims_being_deleted(settings, api, namespace)
    if refusals:
        for check in refusals:
            print(f"pidispatch: refusing to start: {check.message}; fix: {check.fix}", file=sys.stderr)
        return 2
    dispatcher = Dispatcher(settings, api, namespace, forge)
    registry = kopf.OperatorRegistry()
    register(registry, dispatcher, Retention(settings, dispatcher.cluster))
    metrics.serve(settings.metrics_port)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    kopf.run(registry=registry, namespaces=[namespace], peering_name=settings.peering, standalone=False,
             liveness_endpoint=liveness, identity=settings.pod_name)  # type: ignore[arg-type]
    return 0


def claims_being_deleted(settings: OperatorSettings, api: Api, namespace: str) -> list[Check]:
    """The refusals (doctor's ``claims`` failures) for a staging or store claim that is being deleted:
    a Job staged into one would lose its copy with the claim, and its Pod could not mount it."""
    from pidispatch.doctor import terminating_claims
    from pidispatch.doctor_edge import gather_claims
    from pidispatch.kubeapi import ApiError

    try:
        pvcs, pods = gather_claims(api, settings, namespace)
    except ApiError as exc:  # a guard that cannot look must not keep the operator down; doctor says the same
        logging.getLogger("pidispatch.operator").warning("the claims could not be checked: %s", exc)
        return []
    return terminating_claims(pvcs, pods, namespace)
