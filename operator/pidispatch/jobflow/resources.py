"""A job Pod's resources: the Trigger's, else the deployment's, never without an ephemeral-storage limit
(issue 31; docs/architecture.md#pod)."""

from __future__ import annotations

from pidispatch.api.models import TriggerRun
from pidispatch.settings import ConfigError, OperatorSettings, parse_bytes

EPHEMERAL_STORAGE = "ephemeral-storage"


def job_resources(settings: OperatorSettings, run: TriggerRun) -> dict[str, dict[str, str]]:
    """The Trigger's ``run.resources``, else the deployment's; with the deployment's ephemeral-storage
    request and limit wherever they name none, so that no job Pod's disk is unbounded (issue 31)."""
    given = run.resources
    if given is not None and given.model_fields_set:  # the Trigger set something: its resources, whole
        resources = {"requests": dict(given.requests or {}), "limits": dict(given.limits or {})}
    else:
        deployment = dict(settings.job_resources)
        resources = {part: dict(deployment.get(part, ())) for part in ("requests", "limits")}
    resources["limits"].setdefault(EPHEMERAL_STORAGE, settings.job_ephemeral_storage_limit)
    # Not above a limit a Trigger set lower (the apiserver would refuse the Pod); without a request of its
    # own, the apiserver makes the limit the request.
    limit, request = _bytes(resources["limits"][EPHEMERAL_STORAGE]), settings.job_ephemeral_storage_request
    wanted = _bytes(request)
    if EPHEMERAL_STORAGE not in resources["requests"] and limit is not None and wanted is not None and wanted <= limit:
        resources["requests"][EPHEMERAL_STORAGE] = request
    return resources


def _bytes(quantity: object) -> int | None:
    """A quantity's bytes, or None for one in a form not parsed here (the apiserver judges it)."""
    try:
        return parse_bytes(EPHEMERAL_STORAGE, str(quantity), 0)
    except ConfigError:
        return None
