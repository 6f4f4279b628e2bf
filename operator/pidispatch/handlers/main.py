"""``pidispatch operator``: configure logging and metrics, build the job flow's dispatcher, run kopf."""

from __future__ import annotations

import logging
import sys

from pidispatch.settings import OperatorSettings


def run_operator(settings: OperatorSettings, verbose: bool = False) -> int:
    """Run until SIGTERM. Exit 2 when the cluster cannot be reached or the settings cannot work."""
    import kopf

    from pidispatch import metrics
    from pidispatch.events import log_services_as_json
    from pidispatch.handlers.register import register
    from pidispatch.jobflow.dispatcher import Dispatcher
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
    dispatcher = Dispatcher(settings, api, namespace, forge)
    registry = kopf.OperatorRegistry()
    register(registry, dispatcher)
    metrics.serve(settings.metrics_port)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    kopf.run(registry=registry, namespaces=[namespace], peering_name=settings.peering, standalone=False,
             liveness_endpoint=liveness, identity=settings.pod_name)  # type: ignore[arg-type]
    return 0
