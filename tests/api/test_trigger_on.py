"""A Trigger's ``on`` says only what the receiver acts on: a field its event never reads, or a label or comment
Trigger without the label or phrase it fires on, is refused at load (``api/trigger.py``: ``Ready=False``,
``FieldNotForEvent``, ``LabelMissing``, ``PhraseMissing``) instead of being reported Ready and ignored.

The tables of ``api/trigger.py`` are checked against the receiver's own matching (``receiver/delivery.py``): a
field changes whether a delivery matches exactly on the events the table says read it, and a Trigger refused as
never firing matches no delivery of its event.
"""

from __future__ import annotations

import pytest

from pidispatch.api.trigger import EVENT_FIELDS, NEVER_FIRES, first_refusal
from pidispatch.api.vocabulary import TRIGGER_EVENTS
from pidispatch.receiver.delivery import Event, mismatch

DELIVERED = [event for event in TRIGGER_EVENTS if event != "cron"]  # cron Triggers match no delivery
# A value of each field that the event below does not satisfy: where the receiver reads the field, it then matches
# nothing.
SPOILED = {"label": "not-this-label", "phrase": "@someone-else", "authorAssociations": ["NONE"]}


def event_of(trigger_event: str) -> Event:
    """A delivery of ``trigger_event`` that a Trigger with ``on.label: pi`` / ``on.phrase: '@pi'`` matches."""
    return Event(trigger_event=trigger_event, repository="acme/widgets", sender="alice", sender_is_bot=False,
                 issue=7, text="@pi fix the tests", label="pi", author_association="OWNER")


def firing_on(event: str) -> dict:
    """The least ``on`` of ``event`` that fires: its label or phrase where it needs one."""
    if event not in NEVER_FIRES:
        return {"event": event}
    field = NEVER_FIRES[event][0]
    return {"event": event, field: {"label": "pi", "phrase": "@pi"}[field]}


def trigger(on: dict) -> dict:
    return {"metadata": {"name": "t"}, "spec": {"on": on, "run": {}}}


@pytest.mark.parametrize("event", DELIVERED)
def test_the_least_on_of_each_event_matches_its_delivery_and_loads(event: str) -> None:
    assert mismatch(trigger(firing_on(event)), event_of(event)) is None
    assert first_refusal({"on": firing_on(event), "run": {}}) is None


@pytest.mark.parametrize(("event", "field"), [(e, f) for e in DELIVERED for f in EVENT_FIELDS])
def test_a_field_is_read_on_exactly_the_events_the_table_names(event: str, field: str) -> None:
    """The receiver's matching, not the table, decides: a value the delivery does not satisfy stops the match
    exactly where ``EVENT_FIELDS`` says the field is read; anywhere else the receiver ignores it, so the Trigger is
    refused, naming the field and the event."""
    on = {**firing_on(event), field: SPOILED[field]}
    read = mismatch(trigger(on), event_of(event)) is not None
    assert read == (event in EVENT_FIELDS[field]), (field, event)
    refusal = first_refusal({"on": on, "run": {}})
    if read:
        assert refusal is None
    else:
        assert refusal is not None and refusal.reason == "FieldNotForEvent"
        message = refusal.message
        assert message.startswith(f"on.{field} is set but on.event is {event!r}"), message


@pytest.mark.parametrize("field", list(EVENT_FIELDS))
def test_no_event_specific_field_on_a_cron_trigger(field: str) -> None:
    refusal = first_refusal({"on": {"event": "cron", "schedule": "0 6 * * *", "repository": "acme/widgets",
                                    field: SPOILED[field]}, "run": {}})
    assert refusal is not None and refusal.reason == "FieldNotForEvent"
    assert f"on.{field}" in refusal.message and "'cron'" in refusal.message


@pytest.mark.parametrize("event", DELIVERED)
@pytest.mark.parametrize("missing", [None, ""], ids=["unset", "empty"])
def test_a_trigger_that_can_never_fire_is_refused_naming_what_is_missing(event: str, missing: str | None) -> None:
    """Without its label or phrase the receiver matches no delivery of the event: such a Trigger is refused
    (never ``Ready`` while it runs nothing). A review Trigger's phrase is optional: without one it matches every
    review."""
    fires = firing_on(event)
    needed = NEVER_FIRES[event][0] if event in NEVER_FIRES else "phrase"
    on = {**{k: v for k, v in fires.items() if k != needed}, **({needed: missing} if missing is not None else {})}
    never = mismatch(trigger(on), event_of(event)) is not None
    assert never == (event in NEVER_FIRES), event
    refusal = first_refusal({"on": on, "run": {}})
    if never:
        assert refusal is not None and refusal.message.startswith(f"on.{needed} is not set"), refusal
        assert refusal.reason == {"label": "LabelMissing", "phrase": "PhraseMissing"}[needed]
    else:
        assert refusal is None
