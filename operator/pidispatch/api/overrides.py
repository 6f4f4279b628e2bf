"""Does a Trigger's Pod overrides ask for more than the job Pod policy allows? Said when the Trigger loads.

The chart's ``jobPodPolicy`` lists what a Trigger may ask for (``triggerEnv``, ``configMaps``, ``priorityClasses``)
and caps ``run.resources`` (``maxResources``); the ValidatingAdmissionPolicy holds every job Pod to the lists
(``templates/job-pod-policy.yaml``), so a Pod outside them would be refused at creation and its Job fail
``PodRefused``. This module compares the Trigger with the same lists first: the Trigger is then not Ready
(``OverrideNotAllowed``, naming the value and the list), and its Jobs are refused at admission
(``TriggerNotReady``), as for a placement conflict (``api/placement.py``). docs/nodes.md#pod-overrides.
"""

from __future__ import annotations

from pidispatch.api.models import TriggerRun
from pidispatch.contract.overrides import quantity_value
from pidispatch.settings.jobpod import TriggerPolicy

OVERRIDE_NOT_ALLOWED = "OverrideNotAllowed"  # the Trigger's Ready reason when its overrides exceed the policy


def _listed(what: str, value: str, allowed: frozenset[str], values: str) -> str:
    listed = ", ".join(sorted(allowed)) or "none"
    return (f"{what} {value} is not allowed by the job Pod policy (jobPodPolicy.{values}: {listed}); list it there "
            "or remove it from the Trigger")


def policy_problem(run: TriggerRun, policy: TriggerPolicy | None) -> str | None:
    """Why ``run``'s overrides ask for more than ``policy`` allows, or ``None`` (also when the policy is off)."""
    if policy is None:
        return None
    for var in run.env or ():
        if var.name not in policy.env:
            return _listed("run.env", var.name, policy.env, "triggerEnv")
    for volume in run.volumes or ():
        if volume.configMap not in policy.config_maps:
            return _listed(f"run.volumes[{volume.name}].configMap", volume.configMap, policy.config_maps, "configMaps")
    if run.priorityClassName is not None and run.priorityClassName not in policy.priority_classes:
        return _listed("run.priorityClassName", run.priorityClassName, policy.priority_classes, "priorityClasses")
    ceiling = dict(policy.max_resources)
    for part in ("requests", "limits"):
        asked = getattr(run.resources, part, None) or {}
        for resource, quantity in sorted(asked.items()):
            most = ceiling.get(resource)
            if most is None:
                continue
            got, cap = quantity_value(quantity), quantity_value(most)
            if got is None or cap is None or got > cap:
                return (f"run.resources.{part}.{resource} {quantity} is above the job Pod policy's ceiling "
                        f"(jobPodPolicy.maxResources.{resource}: {most})")
    return None
