"""One reader per kind of value a setting holds, and the one rule for an empty value.

Every reader takes the environment and the variable's name, returns the typed value (or the default
when the variable is unset), and raises :class:`ConfigError` naming the variable and the accepted form
when the value cannot be used. A malformed value is never a silent default: a typo in
``PI_SESSION_MAX_BYTES`` must not quietly turn a bound off. Three of the kinds also have a parser of a
text already in hand (:func:`parse_strict_int`, :func:`parse_bytes`, :func:`parse_json`): a Trigger's
quantity, a value whose empty form is itself an error.

The kinds: a whole number within bounds (:func:`integer`), a Kubernetes quantity of bytes
(:func:`quantity`), a ``true``/``false`` flag (:func:`flag`), free text (:func:`text`), one short line
(:func:`one_line`), one of a closed set (:func:`one_of`), a Kubernetes object name (:func:`object_name`),
an absolute path (:func:`absolute_path`), an http(s) URL (:func:`url`) and JSON (:func:`json_setting`;
the shape of each JSON setting is checked beside the setting that owns it).

The empty rule (:func:`refuse_empty`) runs first in every ``from_env``: an empty or blank value of any
variable a component reads is refused, so the readers below meet a blank value only when called on their
own, and then treat it as unset (:func:`given`).

Plain Python on purpose: the store commands import this and must start in well under 200 ms.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, overload

from pidispatch.settings.errors import ConfigError

# The one variable whose empty value has a documented meaning: "empty means unset" (docs/store-contract.md#settings).
EMPTY_MEANS_UNSET = frozenset({"PI_SESSIONS_DIR"})


def given(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value as written, or ``None`` when it is unset, empty or only whitespace.

    The one test of "no value given" that every reader below shares.
    """
    raw = env.get(name)
    return None if raw is None or raw.strip() == "" else raw


def refuse_empty(env: Mapping[str, str], names: Iterable[str]) -> None:
    """An empty (or blank) value of any of ``names`` is a configuration error naming the variable.

    A manifest that renders a missing value as ``""`` must say so, never quietly run with a default:
    an empty ``GITHUB_AUTH_SOURCE`` once meant ``gh``, the full-scope credential. Unset the variable to
    get its default. The exceptions are documented in :data:`EMPTY_MEANS_UNSET`.
    """
    for name in names:
        raw = env.get(name)
        if raw is not None and given(env, name) is None and name not in EMPTY_MEANS_UNSET:
            raise ConfigError(name, raw, "a value: an empty one is refused (unset the variable to get its default)")


# ---- whole numbers ---------------------------------------------------------------------------------------------

_CANONICAL_NON_NEGATIVE = re.compile(r"(?:0|[1-9][0-9]*)")


def parse_strict_int(variable: str, raw: str, accepted: str, minimum: int = 0, maximum: int | None = None) -> int:
    """Trim, parse base-10, and require the canonical decimal form (so ``07``, ``+3``, ``1e3`` fail).

    ``minimum`` and ``maximum`` are inclusive; a value outside them is refused like a malformed one.
    """
    text = raw.strip()
    if not _CANONICAL_NON_NEGATIVE.fullmatch(text):
        raise ConfigError(variable, raw, accepted)
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(variable, raw, accepted)
    return value


@overload
def integer(env: Mapping[str, str], name: str, accepted: str, *, default: int,
            minimum: int = 0, maximum: int | None = None) -> int: ...


@overload
def integer(env: Mapping[str, str], name: str, accepted: str, *, default: None = None,
            minimum: int = 0, maximum: int | None = None) -> int | None: ...


def integer(env: Mapping[str, str], name: str, accepted: str, *, default: int | None = None,
            minimum: int = 0, maximum: int | None = None) -> int | None:
    """A whole number from ``minimum`` to ``maximum`` (see :func:`parse_strict_int`); unset: ``default``.

    ``default=None`` is the kind "a bound, or none when unset" (a TTL, a context bound, an App id).
    """
    raw = given(env, name)
    if raw is None:
        return default
    return parse_strict_int(name, raw, accepted, minimum, maximum)


# ---- quantities of bytes ---------------------------------------------------------------------------------------

# A Kubernetes quantity of bytes: a decimal number with an optional binary (Ki..Ei) or decimal (k..E) suffix
# or exponent. No milli- (a fraction of a byte) and no sign.
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][0-9]+)?")
_QUANTITY_SUFFIX = {
    "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
QUANTITY_ACCEPTED = "a Kubernetes quantity of bytes of at least 1Mi, e.g. 10Gi, 500Mi or 20G"


def parse_bytes(variable: str, raw: str, minimum: int = 2**20) -> int:
    """A quantity (``10Gi``, ``500M``, ``1e9``) as whole bytes, rounded up as Kubernetes does.

    A :class:`ConfigError` naming ``variable`` when it is not one, or is below ``minimum`` (a workspace
    of a few bytes is a typo).
    """
    from fractions import Fraction  # imported here: the store commands never parse a quantity

    m = _QUANTITY.fullmatch(raw.strip())
    if m is None:
        raise ConfigError(variable, raw, QUANTITY_ACCEPTED)
    number, suffix = m.group(1), m.group(2) or ""
    exponent = suffix[:1] in ("e", "E") and suffix != "E"  # "E" alone is exa, "E3" an exponent
    scale = 10 ** int(suffix[1:]) if exponent else _QUANTITY_SUFFIX[suffix]
    value = Fraction(number) * scale
    whole = -(-value.numerator // value.denominator)
    if whole < minimum:
        raise ConfigError(variable, raw, QUANTITY_ACCEPTED)
    return whole


def quantity(env: Mapping[str, str], name: str, default: str) -> tuple[str, int]:
    """A quantity of bytes as written (trimmed, for a manifest) and in bytes (for a comparison or a check)."""
    raw = given(env, name)
    written = default if raw is None else raw.strip()
    return written, parse_bytes(name, written)


# ---- text ------------------------------------------------------------------------------------------------------

@overload
def text(env: Mapping[str, str], name: str, default: str) -> str: ...


@overload
def text(env: Mapping[str, str], name: str, default: None = None) -> str | None: ...


def text(env: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """Free text taken as given (an image, a namespace, a claim's name); unset: ``default``."""
    raw = given(env, name)
    return default if raw is None else raw


def one_line(env: Mapping[str, str], name: str, default: str) -> str:
    """A short single-line text setting (a git identity), trimmed; unset: ``default``.

    No newline, carriage return or NUL, and no ``<`` or ``>``: git writes an identity as ``name <email>``,
    and a commit's author line must stay one line it can parse.
    """
    raw = given(env, name)
    if raw is None:
        return default
    if len(raw) > 200 or any(c in raw for c in "\n\r\0<>"):
        raise ConfigError(name, raw, "one line of at most 200 characters without < or >")
    return raw.strip()


def one_of(env: Mapping[str, str], name: str, choices: Collection[str], accepted: str) -> str | None:
    """One of ``choices``, exactly as spelled; unset: ``None`` (the caller knows what that means)."""
    raw = given(env, name)
    if raw is None:
        return None
    if raw not in choices:
        raise ConfigError(name, raw, accepted)
    return raw


def flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """``true`` or ``false`` (trimmed; no ``yes``, ``1`` or ``True``); unset: ``default``."""
    raw = given(env, name)
    if raw is None:
        return default
    if raw.strip() not in ("true", "false"):
        raise ConfigError(name, raw, "true or false")
    return raw.strip() == "true"


# ---- names, paths and addresses --------------------------------------------------------------------------------

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # a key of a Secret's or a ConfigMap's data
OBJECT_NAME_ACCEPTED = "a Kubernetes object name (DNS subdomain)"


def is_object_name(name: str) -> bool:
    """A Kubernetes object name: a DNS subdomain of at most 253 characters."""
    return bool(DNS_SUBDOMAIN.fullmatch(name)) and len(name) <= 253


def object_name(env: Mapping[str, str], name: str, accepted: str = OBJECT_NAME_ACCEPTED) -> str | None:
    """The name of a Kubernetes object (a ConfigMap, a release); unset: ``None``."""
    raw = given(env, name)
    if raw is None:
        return None
    if not is_object_name(raw):
        raise ConfigError(name, raw, accepted)
    return raw


def absolute_path(env: Mapping[str, str], name: str) -> str | None:
    """An absolute path to a file the Pod mounts (a Secret's key, a CA bundle); unset: ``None``.

    A relative path would be resolved against whatever the working directory happens to be.
    """
    raw = given(env, name)
    if raw is None:
        return None
    if not raw.startswith("/"):
        raise ConfigError(name, raw, "an absolute path to a file (a mounted Secret)")
    return raw


# No whitespace, query or fragment, and no user info (an ``@`` in the host: credentials in a URL end up in logs).
_HTTP_URL = re.compile(r"https?://[^\s/?#@]+(/[^\s?#]*)?")


def url(env: Mapping[str, str], name: str, default: str, accepted: str) -> str:
    """An http(s) URL without query or credentials, without its trailing ``/``; unset: ``default``."""
    raw = given(env, name)
    value = default if raw is None else raw
    if not _HTTP_URL.fullmatch(value):
        raise ConfigError(name, value, accepted)
    return value.rstrip("/")


# ---- JSON ------------------------------------------------------------------------------------------------------

def parse_json(variable: str, raw: str, accepted: str) -> Any:
    """The JSON value of ``raw``; anything that is not JSON (an empty text too) is a configuration error.

    Its shape is for the caller to check: ``accepted`` says what shape it wants, for the message.
    """
    import json  # imported here: the store commands read no JSON setting

    try:
        return json.loads(raw)
    except ValueError:
        raise ConfigError(variable, raw, accepted) from None


def json_setting(env: Mapping[str, str], name: str, accepted: str) -> Any:
    """The JSON value of a setting, ``None`` when it is unset (see :func:`parse_json`)."""
    raw = given(env, name)
    if raw is None:
        return None
    return parse_json(name, raw, accepted)
