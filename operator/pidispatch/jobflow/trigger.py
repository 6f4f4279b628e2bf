"""Trigger status: ``Ready``, ``ResumeArmed``, ``SessionStore`` and the bounds in force.

The operator repeats the Trigger CRD's CEL refusals (defence in depth, and for clusters that apply the
CRD without CEL), adds its own (``api/trigger.py``: a field the Trigger's event never reads, a Trigger that could
never fire, ``run.kind: local``), and says, per Trigger, whether its jobs would resume and whether a store is there. A
Trigger whose resumed jobs could never be placed on the operator's node (ReadWriteOnce staging, mount
mode: ``api/placement.py``) is not Ready either, and its Jobs are refused at admission as any Job of a
Trigger that is not Ready. So is a cron Trigger whose ``on.schedule`` cannot fire (``InvalidSchedule``); a
cron Trigger that can says in its Ready message when it fires next (``jobflow/cron.py`` fires it).

``summarize_trigger.py`` judges the status; :func:`write_status` here is its one writer, for this module's
reading and the cron loop's record alike.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pidispatch.api import cron
from pidispatch.api.overrides import OVERRIDE_NOT_ALLOWED, policy_problem
from pidispatch.api.placement import PLACEMENT_CONFLICT, OperatorNode, placement_conflict
from pidispatch.api.trigger import Refusal
from pidispatch.api.views import JobView, ObjectMeta, TriggerView
from pidispatch.events import emit
from pidispatch.jobflow import status_patch
from pidispatch.jobflow.cluster import Cluster
from pidispatch.jobflow.summarize_trigger import Readiness, TriggerOutcome, summarize_trigger
from pidispatch.kubeapi import ApiError
from pidispatch.settings import Settings
from pidispatch.settings.scheduling import Scheduling


def firing(trigger: TriggerView) -> cron.Schedule | None:
    """``trigger``'s schedule when it is a cron Trigger that may fire, else ``None``."""
    spec = trigger.spec
    if (spec is None or spec.on.event != "cron" or trigger.meta.deletion or trigger.refusal is not None
            or trigger.schedule_problem is not None or spec.on.schedule is None):
        return None
    return cron.parse(spec.on.schedule, spec.on.timeZone)


def next_fire(trigger: TriggerView, now: datetime) -> datetime | None:
    """When ``trigger`` fires next: the first slot after ``now``; ``None`` for a Trigger that does not fire."""
    schedule = firing(trigger)
    return cron.next_slot(schedule, now) if schedule is not None else None


def write_status(cluster: Cluster, trigger: TriggerView, found: TriggerOutcome,
                 version: str | None = None) -> str | None:
    """The one writer of a Trigger's status: ``found`` summarized (``summarize_trigger``), written if it changes
    anything; answers the Trigger's ``resourceVersion`` after it.

    The Trigger's reading (:class:`Readiness`) is written as it is, whoever wrote last. The cron record is a
    claim: it is written only if the Trigger is still at ``version`` (default: as ``trigger`` was read), and a
    conflict answers ``None``: another writer came first, and the cron loop's next turn reads what it wrote.
    """
    claim = not isinstance(found, Readiness)
    try:
        written = status_patch.write_status(cluster.api, cluster.crd("triggers", trigger.name, "status"), trigger,
                                            lambda current: summarize_trigger(current, found).to_patch(),
                                            conditional=claim,
                                            version=version)
    except ApiError as exc:
        if exc.status == 409 and claim:
            return None
        raise
    if written is None:
        return version if version is not None else trigger.meta.resource_version
    got = ObjectMeta.of(written.body).resource_version
    return str(got) if got is not None else None


class Triggers:
    """The Triggers as the watch last delivered them, and the one writer of their status."""

    def __init__(self, cluster: Cluster, settings: Settings, rules: Scheduling | None = None,
                 node_name: str | None = None, wall: Callable[[], float] = time.time) -> None:
        self.cluster = cluster
        self.wall = wall
        self.settings = settings
        self.rules = rules or Scheduling()
        self.node_name = node_name
        # The operator's Node as last read (None: co-location off, the name unknown, or the Node unreadable).
        self.node: OperatorNode | None = None
        self._node_unreadable = False
        self._known: dict[str, TriggerView] = {}

    def read_node(self) -> None:
        """Read the operator's Node (its labels and taints may change): only under co-location, where a
        resumed job Pod must land there. Unreadable (no ``get nodes`` grant): no placement check, said once."""
        if self.rules.colocate_with is None or not self.node_name:
            return
        try:
            body = self.cluster.api.get_or_none(f"/api/v1/nodes/{self.node_name}")
        except ApiError as exc:
            if exc.status not in (401, 403):
                raise
            body = None
        if body is None and not self._node_unreadable:
            emit("placement_unchecked", node=self.node_name,
                 why="the operator's Node cannot be read (RBAC get nodes), so Triggers whose resumed jobs could not "
                     "run there are not refused ahead")
        self._node_unreadable = body is None
        self.node = OperatorNode.of(body) if body is not None else None

    def placement(self, trigger: TriggerView) -> str | None:
        """Why ``trigger``'s resumed jobs cannot run on the operator's node, or ``None``."""
        if trigger.spec is None or trigger.refusal is not None:
            return None
        return placement_conflict(trigger, self.rules, self.node)

    def policed(self, trigger: TriggerView) -> TriggerView:
        """``trigger``, refused (``OverrideNotAllowed``) when its Pod overrides ask for more than the job Pod policy
        allows (``api/overrides.py``); a Trigger refused already keeps its own refusal."""
        if trigger.spec is None or trigger.refusal is not None:
            return trigger
        why = policy_problem(trigger.spec.run, self.rules.trigger_policy)
        return trigger if why is None else dataclasses.replace(trigger, refusal=Refusal(OVERRIDE_NOT_ALLOWED, why))

    def on_trigger(self, trigger: TriggerView) -> None:
        """Remember ``trigger`` and write its status if that changed."""
        trigger = self.policed(trigger)
        self._known[trigger.name] = trigger
        upcoming = next_fire(trigger, datetime.fromtimestamp(self.wall(), UTC))
        write_status(self.cluster, trigger, Readiness(self.settings, self.placement(trigger), upcoming))

    def forget(self, name: str) -> None:
        self._known.pop(name, None)

    def of(self, job: JobView) -> TriggerView | None:
        """The Job's Trigger (one GET the first time a name is asked for), or ``None`` when there is none.

        A Trigger whose resumed jobs cannot be placed comes back refused (``refusal`` the placement
        conflict), so the admission refuses its Jobs as those of any Trigger that is not Ready; so does a cron
        Trigger whose schedule cannot fire."""
        name = job.trigger_name
        known = self._known.get(name)
        if known is None:
            found = self.cluster.api.get_or_none(self.cluster.crd("triggers", name))
            if found is not None:
                known = self._known[name] = self.policed(TriggerView.of(found))
        if known is None:
            return None
        conflict = self.placement(known)  # None for a refused Trigger: its own refusal (a schedule's too) stands
        return known if conflict is None else dataclasses.replace(known, refusal=Refusal(PLACEMENT_CONFLICT, conflict))
