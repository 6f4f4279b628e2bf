"""kopf registrations: watch-event handlers only, so kopf keeps no diff base (handlers/register.py)."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from pidispatch.handlers.register import NoDiffBase, register


class Started:
    """Stands in for the Dispatcher and for the Jobs' watch: the startup handler only starts them."""

    def __init__(self) -> None:
        self.started = False

    def start(self) -> None:
        self.started = True

    def attach(self, keys: object) -> None:  # the queue hands the Dispatcher's work back through itself
        pass


def registered() -> tuple[kopf.OperatorRegistry, Started]:
    registry = kopf.OperatorRegistry()
    dispatcher = Started()
    register(registry, dispatcher, jobs=Started())  # type: ignore[arg-type]
    return registry, dispatcher


def test_every_resource_handler_reacts_to_watch_events_only() -> None:
    # NoDiffBase is right only while this holds: kopf's change handlers and daemons read the diff base.
    # kopf has no public listing of a registry's handlers, so its registries are read directly.
    registry, _ = registered()
    assert not registry._changing.get_all_handlers()
    assert not registry._spawning.get_all_handlers()
    assert not registry._indexing.get_all_handlers()
    watched = sorted(handler.fn.__name__ for handler in registry._watching.get_all_handlers())
    # The Jobs are the operator's own watch (handlers/jobwatch.py), not kopf's.
    assert watched == ["pod_event", "sessionkey_event", "trigger_event"]


def test_startup_installs_no_diff_base() -> None:
    registry, dispatcher = registered()
    settings = kopf.OperatorSettings()
    assert not isinstance(settings.persistence.diffbase_storage, NoDiffBase)  # kopf's default: annotations
    (startup,) = [h for h in registry._activities.get_all_handlers() if h.fn.__name__ == "startup"]
    startup.fn(settings=settings)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)
    assert dispatcher.started


def test_no_diff_base_copies_nothing_and_refuses_to_store() -> None:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
                           "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}
    body = kopf.Body(pod)
    storage = NoDiffBase()
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    with pytest.raises(NotImplementedError, match="diff base"):
        storage.store(body=body, patch=kopf.Patch(), essence=kopf.BodyEssence())
