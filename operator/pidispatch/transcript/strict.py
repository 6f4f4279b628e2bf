"""Strict validation of decoded JSON into frozen dataclasses: the few checks `model.py` needs.

Why not pydantic: `pidispatch transcript check` must return in well under 200 ms (docs/cli.md#start-up-cost),
and importing pydantic, defining the models and building their validators took about 200 ms here. The
models need a dozen kinds of check, so they are plain functions, as `settings/` did for pydantic-settings.
Messages keep the wording pydantic gave them (what `transcript check` printed before), except where it
named Python classes, echoed a whole value or repeated itself.

A *check* takes one decoded JSON value and returns it, converted where the model declares another
form (an integer declared as a float becomes a float, an object becomes a model), or raises
`ModelError` listing what is wrong, with paths relative to that value. Models declare one check per
field with `required(...)` / `optional(...)`; `validate(Model, value)` runs them all, collects every
problem (not just the first) and builds the frozen instance. Constructing a model directly runs no
checks: that is for code and tests that build trees by hand.

Values come from `json` (`_jsjson.loads`), so they are exactly dict, list, str, int, float, bool or
None; checks compare types with `is`, which also keeps a bool (a subclass of int) from passing as an
int.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, NamedTuple, NoReturn, TypeVar

from pidispatch.transcript.header import parse_iso_timestamp_ms

Check = Callable[[Any], Any]
M = TypeVar("M")

_CHECK = "check"
UNKNOWN_FIELDS = "extra_fields"


class FieldError(NamedTuple):
    """One problem: where (object keys and list indexes from the validated value) and what."""

    path: tuple[str | int, ...]
    message: str


class ModelError(Exception):
    """A value does not fit its model; `errors` lists every problem, in field order."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__(errors)
        self.errors = errors

    def under(self, step: str | int) -> list[FieldError]:
        """The same errors, as seen from the object or list that holds the failed value at `step`."""
        return [FieldError((step, *error.path), error.message) for error in self.errors]

    def __str__(self) -> str:
        return "; ".join(f"{'.'.join(map(str, error.path)) or 'value'}: {error.message}" for error in self.errors)


def _fail(message: str) -> NoReturn:
    raise ModelError([FieldError((), message)])


# --- how a model declares its fields --------------------------------------------------------------


def required(check: Check) -> Any:
    """A field that must be present; `check` validates its value."""
    return field(metadata={_CHECK: check})


def optional(check: Check) -> Any:
    """A field that may be absent (then None); `check` validates its value when present."""
    return field(default=None, metadata={_CHECK: check})


class Envelope:
    """Base of models that refuse unknown fields: pi's own, versioned file format (model.py)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Payload:
    """Base of models that keep unknown fields, in `extra_fields`: pi-ai's provider-facing types."""

    extra_fields: dict[str, Any] = field(default_factory=dict)


# --- scalar checks --------------------------------------------------------------------------------


def anything(value: Any) -> Any:
    return value


def string(value: Any) -> str:
    if type(value) is not str:
        _fail("Input should be a valid string")
    return value


def boolean(value: Any) -> bool:
    if type(value) is not bool:
        _fail("Input should be a valid boolean")
    return value


def integer(value: Any) -> int:
    if type(value) is not int:
        _fail("Input should be a valid integer")
    return value


def non_negative_int(value: Any) -> int:
    number = integer(value)
    if number < 0:
        _fail("Input should be greater than or equal to 0")
    return number


def non_negative_number(value: Any) -> float:
    """A float, or an integer taken as one (as pydantic's strict mode does); at least 0."""
    number: float
    if type(value) is int:
        try:
            number = float(value)
        except OverflowError:
            _fail("Input should be a valid number")
    elif type(value) is float:
        number = value
    else:
        _fail("Input should be a valid number")
    # `not >=` rather than `<` so that NaN is refused too.
    if not number >= 0:
        _fail("Input should be greater than or equal to 0")
    return number


def non_empty_string(value: Any) -> str:
    """Ids: at least one character, and valid Unicode (no lone surrogate), as pydantic required."""
    text = string(value)
    if not text:
        _fail("String should have at least 1 character")
    if not _is_unicode(text):
        _fail("Input should be a valid string, unable to parse raw data as a unicode string")
    return text


def iso_timestamp(value: Any) -> str:
    """What pi writes: ISO-8601 with `Z` or an offset (the same reading as the age gate's)."""
    text = string(value)
    if parse_iso_timestamp_ms(text) is None:
        _fail("not an ISO-8601 timestamp with Z or an offset")
    return text


def json_object(value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        _fail("Input should be a valid dictionary")
    return value


def _is_unicode(text: str) -> bool:
    """False when `text` holds a lone surrogate (JSON's `\\ud800` escape decodes to one)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- checks built from other checks ---------------------------------------------------------------


def literal(*choices: str | int) -> Check:
    """Exactly one of `choices`. A number choice also matches the equal float (3.0 for 3), never a
    bool: pydantic's strict mode did the same, and JavaScript's JSON.parse reads 3.0 as 3."""
    shown = [repr(choice) for choice in choices]
    message = "Input should be " + (f"{', '.join(shown[:-1])} or {shown[-1]}" if len(shown) > 1 else shown[0])

    def check(value: Any) -> Any:
        if type(value) is not bool:
            for choice in choices:
                if value == choice:
                    return choice
        _fail(message)

    return check


def nullable(check: Check) -> Check:
    def check_or_none(value: Any) -> Any:
        return None if value is None else check(value)

    return check_or_none


def list_of(item: Check) -> Check:
    def check(value: Any) -> list[Any]:
        if type(value) is not list:
            _fail("Input should be a valid list")
        items = []
        errors: list[FieldError] = []
        for index, element in enumerate(value):
            try:
                items.append(item(element))
            except ModelError as error:
                errors.extend(error.under(index))
        if errors:
            raise ModelError(errors)
        return items

    return check


def string_or_list_of(item: Check) -> Check:
    """`str | list[...]` (message content). A list is judged as a list only: pydantic also said
    that it is not a string, which was noise on a list with one bad block."""
    as_list = list_of(item)

    def check(value: Any) -> Any:
        if type(value) is str:
            return value
        if type(value) is list:
            return as_list(value)
        _fail("Input should be a valid string or list")

    return check


def nested(model: type[Any]) -> Check:
    def check(value: Any) -> Any:
        return validate(model, value)

    return check


def tagged(key: str, models: Mapping[str, type[Any]]) -> Check:
    """A union discriminated by the string at `key` (`type` of a block, `role` of a message)."""
    expected = ", ".join(repr(tag) for tag in models)

    def check(value: Any) -> Any:
        if type(value) is not dict:
            _fail("Input should be a valid dictionary")
        if key not in value:
            _fail(f"Unable to extract tag using discriminator {key!r}")
        tag = value[key]
        model = models.get(tag) if type(tag) is str else None
        if model is None:
            _fail(
                f"Input tag {_shown_tag(tag)} found using {key!r} does not match any of the expected tags: {expected}"
            )
        return validate(model, value)

    return check


def _shown_tag(tag: Any) -> str:
    """The tag as pydantic showed it; a list or object by its type only (it may hold anything)."""
    if type(tag) is str:
        return repr(tag)  # escapes control characters and lone surrogates: one printable line
    if type(tag) in (list, dict):
        return f"of type {type(tag).__name__}"
    return f"'{tag}'"


# --- models ---------------------------------------------------------------------------------------


class _Plan(NamedTuple):
    checks: tuple[tuple[str, Check, bool], ...]  # name, check, required
    names: frozenset[str]
    keeps_unknown: bool


_PLANS: dict[type, _Plan] = {}


def _plan(model: type) -> _Plan:
    plan = _PLANS.get(model)
    if plan is None:
        checks = []
        for spec in fields(model):
            if spec.name == UNKNOWN_FIELDS:
                continue
            if _CHECK not in spec.metadata:
                raise TypeError(f"{model.__name__}.{spec.name} declares no check (use required/optional)")
            checks.append((spec.name, spec.metadata[_CHECK], spec.default is MISSING))
        plan = _Plan(tuple(checks), frozenset(name for name, _, _ in checks), issubclass(model, Payload))
        _PLANS[model] = plan
    return plan


def validate(model: type[M], value: Any) -> M:
    """Check `value` against every field of `model` and build it; raise `ModelError` listing every
    problem: declared fields in declaration order, then unknown fields in the order they appear."""
    if type(value) is not dict:
        _fail("Input should be a valid dictionary")
    plan = _plan(model)
    values: dict[str, Any] = {}
    errors: list[FieldError] = []
    for name, check, is_required in plan.checks:
        if name in value:
            try:
                values[name] = check(value[name])
            except ModelError as error:
                errors.extend(error.under(name))
        elif is_required:
            errors.append(FieldError((name,), "Field required"))
    if not value.keys() <= plan.names:
        unknown = {key: item for key, item in value.items() if key not in plan.names}
        if plan.keeps_unknown:
            errors.extend(
                FieldError((key,), "field name is not valid Unicode") for key in unknown if not _is_unicode(key)
            )
            values[UNKNOWN_FIELDS] = unknown
        else:
            errors.extend(FieldError((key,), "Extra inputs are not permitted") for key in unknown)
    if errors:
        raise ModelError(errors)
    built: M = model(**values)
    return built
