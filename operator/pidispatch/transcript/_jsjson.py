"""JSON and string helpers that behave like the JavaScript pi is written in.

pi reads and measures its session file with `JSON.parse`, `String.prototype.trim`, `string.length`
(UTF-16 code units) and `JSON.stringify`. Python's defaults differ in small ways (it accepts `NaN`,
counts code points, formats floats differently), and each difference would make a gate or a context
reading disagree with what pi itself does. Everything here is pure and never raises on any input.
"""

from __future__ import annotations

import json
import math
from typing import Any

# ECMAScript WhiteSpace + LineTerminator: what `String.prototype.trim` removes. Differs from
# `str.isspace` (which also counts U+001C..U+001F and U+0085, and not U+FEFF).
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


class _NotJson(ValueError):
    """A constant JSON.parse rejects (NaN, Infinity) was found."""


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# `_DECODER.decode` without its Python layers (`decode`, `raw_decode`, two regular-expression matches):
# every stage parses at least the header line here, with cold caches, and those layers were about a
# third of a parse's time then. The same steps: skip JSON whitespace, scan one value with the C
# scanner (`StopIteration` when none starts there), refuse anything but JSON whitespace after it.
_scan_value = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__, not in typeshed
_JSON_WHITESPACE = " \t\n\r"  # json.decoder.WHITESPACE, the only whitespace JSON allows


def _js_int(text: str) -> int | float:
    """An integer literal as JSON.parse reads it when Python's ``int`` refuses its length.

    ``int`` refuses more than ``sys.get_int_max_str_digits()`` digits (4300 by default) with a plain
    ``ValueError``; JSON.parse reads any length, as a double (``Infinity`` beyond its range).
    """
    try:
        return int(text)
    except ValueError:
        return float(text)


# The same parse for the rare line the digit limit refused: every integer goes through `_js_int`, a
# Python call each, so it is only the second try.
_scan_long_numbers = json.JSONDecoder(parse_constant=_reject_constant,  # type: ignore[attr-defined]
                                      parse_int=_js_int).scan_once


# Returned as the value when parsing failed only because the nesting is deeper than Python's
# recursion limit (~1000 levels). JavaScript's JSON.parse reads such a line, so callers that must not
# be fooled by it (the gate-12 scanner) can tell it apart from a line pi would also skip.
TOO_DEEP = object()


def loads(text: str) -> tuple[bool, Any]:
    """Parse `text` as `JSON.parse` would; return `(ok, value)` instead of raising.

    Why a wrapper: `json.loads` accepts `NaN`/`Infinity`, raises `RecursionError` on deep nesting
    and `ValueError` on integers of more than 4300 digits (which JSON.parse reads as doubles, and
    so does this); a line pi would skip must be skipped here too, a line pi reads must be read, and a
    hostile line must never escape as an exception from a gate. On failure the value is None, or
    `TOO_DEEP` when only the nesting depth defeated Python's parser.
    """
    start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    try:
        value, end = _scan_value(text, start)
    except (StopIteration, json.JSONDecodeError, _NotJson):
        return False, None
    except ValueError:
        # Only the integer digit limit raises a bare ValueError here. pi reads such a line (and a
        # compaction entry in it), so it must not be skipped: parse it again the way JSON.parse does.
        try:
            value, end = _scan_long_numbers(text, start)
        except (StopIteration, ValueError):
            return False, None
        except RecursionError:
            return False, TOO_DEEP
    except RecursionError:
        return False, TOO_DEEP
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        return False, None  # more than whitespace after the value
    return True, value


def error_column(text: str) -> int | None:
    """1-based column where JSON.parse-compatible parsing of `text` fails, or None (no position)."""
    try:
        _DECODER.decode(text)
    except json.JSONDecodeError as error:
        return error.colno
    except (ValueError, RecursionError):
        return None
    return None


def js_trim(text: str) -> str:
    """`String.prototype.trim`."""
    return text.strip(JS_WHITESPACE)


def utf16_len(text: str) -> int:
    """JavaScript `string.length`: UTF-16 code units (astral characters count 2)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def js_number_str(value: float) -> str:
    """`String(number)` / `JSON.stringify(number)` for a number parsed from JSON.

    JSON.parse turns every number into a double; JSON.stringify prints it in ECMAScript's
    shortest form (`1` not `1.0`, `1e+21`, `1e-7`), and non-finite values as `null`.
    """
    try:
        number = float(value)
    except OverflowError:
        return "null"
    if not math.isfinite(number):
        return "null"
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr() gives the shortest round-trip digits, as ECMAScript does; only the layout differs.
    mantissa, _, exp_text = repr(abs(number)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    point = len(int_part) + (int(exp_text) if exp_text else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    k = len(digits)
    if k <= point <= 21:
        body = digits + "0" * (point - k)
    elif 0 < point <= 21:
        body = digits[:point] + "." + digits[point:]
    elif -6 < point <= 0:
        body = "0." + "0" * (-point) + digits
    else:
        exp = point - 1
        exp_str = f"e{'+' if exp >= 0 else '-'}{abs(exp)}"
        body = digits[0] + ("." + digits[1:] if k > 1 else "") + exp_str
    return sign + body


def _js_string_json_len(text: str) -> int:
    length = 2
    for ch in text:
        code = ord(ch)
        if ch in '"\\' or ch in "\b\f\n\r\t":
            length += 2
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            # Control characters and lone surrogates are written as \uXXXX.
            length += 6
        elif code > 0xFFFF:
            length += 2
        else:
            length += 1
    return length


def js_json_len(value: Any) -> int:
    """Length (UTF-16 units) of `JSON.stringify(value)` for a value that came from JSON.

    pi estimates a tool call's size as `name.length + JSON.stringify(arguments).length`; only the
    length matters, so key order (JavaScript moves integer-like keys first) is irrelevant. Walks an
    explicit stack: parsed values nest nearly as deep as the recursion limit, and recursing here
    (two frames per level) would overflow it.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or item is True:
            total += 4
        elif item is False:
            total += 5
        elif isinstance(item, (int, float)):
            total += len(js_number_str(item))
        elif isinstance(item, str):
            total += _js_string_json_len(item)
        elif isinstance(item, list):
            total += 2 + max(len(item) - 1, 0)
            stack.extend(item)
        elif isinstance(item, dict):
            total += 2 + max(len(item) - 1, 0) + sum(_js_string_json_len(str(key)) + 1 for key in item)
            stack.extend(item.values())
    return total
