"""Values as a person types them, and back: the one reader of text into typed values.

A link's parameter, a CSV cell, a command-line flag and a sweep's list all hold text
that must become a knob's or a request field's value. They are read here, by type,
so ``true``, ``none``, ``0.1`` and ``8-96`` mean the same wherever they are typed,
and ``spell`` writes each value back so that ``parse(spell(v), type) == v``.
"""

from __future__ import annotations

import json
import math
import re
import types
import typing

NONE = "none"
_FLAGS = {"true": True, "false": False, "1": True, "0": False, "on": True, "off": False}
_INT = re.compile(r"[+-]?\d{1,18}")  # 18 digits: a 5,000-digit integer is refused, not parsed for seconds
_RANGE = re.compile(r"([+-]?\d{1,18})-([+-]?\d{1,18})")


def parse_bool(text: str) -> bool:
    if text.lower() not in _FLAGS:
        raise ValueError(f"expected true or false, got {text!r}")
    return _FLAGS[text.lower()]


def parse_int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise ValueError(f"expected an integer, got {text!r}")
    return int(text)


def parse_float(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or len(text) > 32:
        raise ValueError(f"expected a number, got {text!r}")
    return number


def parse_range(text: str) -> tuple[int, int]:
    """"8-96" -> (8, 96): a range of lengths, as a generator takes them."""
    match = _RANGE.fullmatch(text)
    if not match:
        raise ValueError(f"expected a range like 8-96, got {text!r}")
    return int(match[1]), int(match[2])


_PARSERS = {bool: parse_bool, int: parse_int, float: parse_float}


def optional_of(hint: object) -> object | None:
    """int | None -> int; None where the hint does not allow None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return None


def parse(text: str, hint: object) -> object:
    """Read text as the type hint says (bool, int, float, str, tuple[int, int], or any of them
    | None); ValueError says what was expected."""
    text = text.strip()
    inner = optional_of(hint)
    if inner is not None:
        return None if text.lower() == NONE else parse(text, inner)
    if typing.get_origin(hint) is tuple:
        return parse_range(text)
    return _PARSERS.get(hint, str)(text)


def spell(value: object) -> str:
    """A value as parse reads it back: true/false, none, 0.1, 8-96."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return f"{value[0]}-{value[1]}"
    return repr(value) if isinstance(value, float) else str(value)


def parse_json(text: str) -> object:
    """One JSON value from a file's line. ValueError says what is wrong in one line, for every
    way text can fail: bad syntax, nesting deep enough to exhaust Python's stack, or an integer
    longer than Python converts (4,300 digits)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer past the digit limit
        raise ValueError(f"not valid JSON: {str(exc).split(';')[0]}") from None
