"""A workload item: one future add_request call, and the rules its fields must meet.

One table of rules (_RULES) checks every item, whatever it came from (a file, a
link, a lesson, a generator), so a bad value gets the same message everywhere.
"""

from __future__ import annotations

import difflib
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields

from engine.limits import MAX_ARRIVAL_MS, MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, MAX_STEPS


class WorkloadError(ValueError):
    """A workload that cannot be used, with where (line, field) and why."""

    def __init__(self, message: str, line: int | None = None, field: str | None = None):
        where = ", ".join(p for p in (f"line {line}" if line else "", f"field {shown(field)}" if field else "") if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.reason, self.line, self.field = message, line, field


def shown(value: object, limit: int = 60) -> str:
    """A value from a file, as repr and cut short: a garbage file's 'column' can be thousands of bytes."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_text(v: object) -> bool:
    """A str that is real text: a lone surrogate (legal in JSON's escapes, not in UTF-8) is not."""
    if not isinstance(v, str):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_number(v: object) -> bool:
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


# field -> (accepts the value?, what it must be). One table serves every source of items.
_RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "prompt": (lambda v: is_text(v) and v.strip() != "", "must be text with at least one non-space character"),
    "max_tokens": (lambda v: is_int(v) and 1 <= v <= MAX_OUTPUT_TOKENS,
                   f"must be an integer in [1, {MAX_OUTPUT_TOKENS}]"),
    "priority": (is_int, "must be an integer (lower values are served first under the priority policy)"),
    "arrival_step": (lambda v: is_int(v) and 0 <= v <= MAX_STEPS, f"must be an integer in [0, {MAX_STEPS}]"),
    "temperature": (lambda v: is_number(v) and 0 <= v <= 5, "must be a number in [0, 5] (0 means greedy)"),
    "ignore_eos": (lambda v: isinstance(v, bool), "must be true or false"),
    "prompt_tokens": (lambda v: v is None or (is_int(v) and 1 <= v <= MAX_PROMPT_TOKENS),
                      f"must be empty or a number of tokens in [1, {MAX_PROMPT_TOKENS}] (a synthetic prompt of that "
                      "length)"),
    "length_scale": (lambda v: is_number(v) and 0 < v <= 1, "must be a fraction in (0, 1]"),
    "stop_token": (lambda v: v is None or (is_text(v) and 0 < len(v) <= 32),
                   "must be empty or a short text that is one token of the model (e.g. a line break)"),
    "arrival_ms": (lambda v: v is None or (is_number(v) and 0 <= v <= MAX_ARRIVAL_MS),
                   f"must be empty or a number of ms in [0, {MAX_ARRIVAL_MS}] (arrival on a deployment's clock)"),
}


@dataclass
class WorkloadItem:
    """One request to submit: its prompt, sampling and when it arrives (an engine step, or a time)."""

    prompt: str
    max_tokens: int = 32
    priority: int = 0
    arrival_step: int = 0
    temperature: float = 0.0
    ignore_eos: bool = False
    arrival_ms: float | None = None  # arrival by time on the modeled clock (needs a deployment), not by step
    prompt_tokens: int | None = None  # a synthetic prompt of this many token ids (prompt is then its label)
    length_scale: float = 1.0  # its lengths are this fraction of the real ones; a deployment prices them whole
    stop_token: str | None = None  # the request stops when it samples this token (vLLM's stop_token_ids)

    def __post_init__(self) -> None:
        for name, (ok, must) in _RULES.items():
            value = getattr(self, name)
            if not ok(value):
                raise WorkloadError(f"{must}, got {shown(value)}", field=name)
        self.temperature = float(self.temperature)  # so 1 and 1.0 read back alike
        if self.arrival_ms is not None:
            self.arrival_ms = float(self.arrival_ms)
        self.length_scale = float(self.length_scale)


FIELDS = tuple(f.name for f in fields(WorkloadItem))
ITEM_TYPES = typing.get_type_hints(WorkloadItem)


def known_fields(name: str, what: str) -> str:
    """The valid names, led by the closest one to a misspelt name."""
    close = difflib.get_close_matches(name, FIELDS, n=1)
    return (f"did you mean {close[0]!r}? " if close else "") + f"known {what}: {', '.join(FIELDS)}"
