"""The one way a status is written, for every kind: a Job's, a SessionKey's, a Trigger's (flux's patch helper).

Each kind has one ``summarize`` that turns what its steps found into the status it wants
(``summarize.py``, ``summarize_sessionkey.py``, ``summarize_trigger.py``); this module writes it:

* **the "changed?" rule**, once (:func:`changes`): a field is sent only when the merge patch would change it
  as stored. The apiserver applies a status patch as a JSON merge patch (RFC 7386): a null member deletes, an
  object merges, a list replaces. So a field whose merge leaves the stored value as it is costs no write,
  and nothing is written when nothing changes;
* **the precondition**: with ``conditional``, the patch carries the ``resourceVersion`` the status was judged
  from, and the apiserver refuses it (409) if the object moved on meanwhile;
* **the retry on that conflict**, with a re-read: the object is read again (``reread``) and judged again,
  never overwritten with what was judged from the older one. Without ``reread`` the 409 is the caller's (a
  cron claim that lost to another writer stands down: the next turn reads what that one wrote).

Nothing else in the operator patches a ``.../status`` path (``tests/jobflow/test_status_writers.py`` holds it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pidispatch.api.views import ObjectMeta
from pidispatch.kubeapi import Api, ApiError

ATTEMPTS = 5  # conflicting writers on one object are a few at once (the jobs ending on one key): a few tries


class Stored(Protocol):
    """A typed view that knows its object's metadata and its status as stored (``api/views.py``'s views)."""

    @property
    def meta(self) -> ObjectMeta: ...

    @property
    def stored_status(self) -> dict[str, Any]: ...


V = TypeVar("V", bound=Stored)


def merged(stored: Any, patch: Any) -> Any:
    """``stored`` after the merge patch ``patch`` (RFC 7386): a null member deletes, an object merges into the
    stored object, anything else (a list, a scalar) replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(stored) if isinstance(stored, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result


def without_nulls(value: Any) -> Any:
    """``value`` as the apiserver keeps it after a merge patch: object members that are null are gone (a list
    is replaced whole, so it is kept as it is)."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


def changes(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``wanted`` whose merge into ``stored`` changes them: the one "changed?" rule. A field
    ``wanted`` null and absent from ``stored`` is no change; a field that would read the same is none."""
    found = {}
    for key, value in wanted.items():
        before = stored.get(key)
        after = None if value is None else merged(before, value)
        if after != before:
            found[key] = value
    return found


@dataclass(frozen=True)
class Written:
    """A status write that happened: the patch sent and the object the apiserver answered with."""

    patch: dict[str, Any]
    body: dict[str, Any]


def write_status(api: Api, path: str, current: V | None, judge: Callable[[V], Mapping[str, Any]], *,
                 conditional: bool = True, version: str | None = None,
                 reread: Callable[[], V | None] | None = None) -> Written | None:
    """Judge ``current`` (``judge``: the status it should have) and patch ``path`` (a ``.../status`` subresource)
    with what changes; ``None`` when nothing did (or the object is gone: ``current`` or ``reread`` answered
    ``None``, as a SessionKey being deleted does).

    ``conditional``: the write carries ``version`` (default: ``current``'s ``resourceVersion``). A 409 then reads
    the object again with ``reread`` and judges once more, up to :data:`ATTEMPTS` times; without ``reread`` the
    conflict is raised to the caller.
    """
    for _ in range(ATTEMPTS):
        if current is None:
            return None
        patch = changes(current.stored_status, judge(current))
        if not patch:
            return None
        body: dict[str, Any] = {"status": patch}
        if conditional:
            expected = version if version is not None else current.meta.resource_version
            if expected is not None:
                body["metadata"] = {"resourceVersion": expected}
        try:
            return Written(patch, api.patch(path, body))
        except ApiError as exc:
            if exc.status != 409 or reread is None:
                raise
        current, version = reread(), None  # the object moved on since it was read: judge it anew
    raise RuntimeError(f"{path}: {ATTEMPTS} conflicting writes in a row")
