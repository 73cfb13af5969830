"""A figure step by step as its first JSON and then only what changed: what keeps a 500-step run in a
few megabytes of offline page (lab/export/player.py).

A step's figure is mostly its predecessor: the timeline gains a column, the block map recolours a few
pages. ``diff(old, new)`` lists the edits that turn one JSON document into the other, and ``patch``
applies them; the page's script applies the same four edits (player.js), and the tests hold the two
to each other by rebuilding every step's figure from the edits.

An edit is a list: ``["set", path, value]``, ``["del", path]``, ``["splice", path, drop, tail]`` (the
list at path loses its first ``drop`` items and gains ``tail`` at its end: a timeline's window moving
on) or ``["trunc", path, n]`` (it keeps its first n). A path is a list of keys and indices; the empty
path is the document itself.
"""

from __future__ import annotations

from typing import Any

Json = Any  # what json.loads returns
Edit = list

MAX_SHIFT = 3  # a list's window moves on by at most this many items a step (a timeline's rows, its columns)
EDIT = 2  # what an edit costs beside the values it carries (its kind and path, a count): in values sent


def diff(old: Json, new: Json) -> list[Edit]:
    """The edits that turn old into new (``patch(old, diff(old, new)) == new``)."""
    return _diff(old, new, [])[0]


def patch(doc: Json, edits: list[Edit]) -> Json:
    """Apply edits in order, in place where a container is edited; returns the document."""
    root = [doc]  # a holder, so that an edit of the whole document has a parent too
    for edit in edits:
        kind, path = edit[0], [0, *edit[1]]
        parent = root
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if kind == "set":
            parent[key] = edit[2]
        elif kind == "del":
            del parent[key]
        elif kind == "splice":
            parent[key] = parent[key][edit[2]:] + edit[3]
        elif kind == "trunc":
            del parent[key][edit[2]:]
        else:
            raise ValueError(f"unknown edit {kind!r}")
    return root[0]


def _size(value: Json) -> int:
    """How many values a document holds: the cost of sending it whole."""
    if isinstance(value, dict):
        return 1 + sum(map(_size, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(_size, value))
    return 1


def _diff(a: Json, b: Json, path: list) -> tuple[list[Edit], int]:
    """The edits and their cost (values sent)."""
    if a == b:
        return [], 0
    if type(a) is not type(b) or not isinstance(a, dict | list):
        return [["set", path, b]], EDIT + _size(b)
    if isinstance(a, dict):
        edits, cost = [], 0
        for key, value in b.items():
            found = (_diff(a[key], value, [*path, key]) if key in a
                     else ([["set", [*path, key], value]], EDIT + _size(value)))
            edits += found[0]
            cost += found[1]
        gone = [["del", [*path, key]] for key in a if key not in b]
        return edits + gone, cost + EDIT * len(gone)
    return _diff_list(a, b, path)


def _diff_list(a: list, b: list, path: list) -> tuple[list[Edit], int]:
    shift = _moved_on(a, b)
    if shift is None:  # items changed too: align them where the most items match cheaply
        shift = max(range(min(len(a), MAX_SHIFT) + 1), key=lambda s: _matches(a[s:], b))
    best = _aligned(a, b, shift, path)
    if best[1] <= len(b):  # sending b whole costs more than its length
        return best
    whole = EDIT + _size(b)
    return best if best[1] < whole else ([["set", path, b]], whole)


def _moved_on(a: list, b: list) -> int | None:
    """The shift by which b is a moved on (and then grown or cut), if it is: C-speed comparisons."""
    for shift in range(min(len(a), MAX_SHIFT) + 1):
        kept = min(len(a) - shift, len(b))
        if a[shift:shift + kept] == b[:kept]:
            return shift
    return None


def _matches(a: list, b: list) -> int:
    """How many items of b are the same item of a, or a list that moved on."""
    return sum(x == y or (isinstance(x, list) and isinstance(y, list) and _moved_on(x, y) is not None)
               for x, y in zip(a, b, strict=False))


def _aligned(a: list, b: list, shift: int, path: list) -> tuple[list[Edit], int]:
    """The edits if b's item i is a's item shift + i: one splice for the window moving on and the items
    it gains, then the items that changed, then a cut if b is shorter."""
    a = a[shift:]
    n = min(len(a), len(b))
    edits: list[Edit] = [["splice", path, shift, b[n:]]] if shift or len(b) > n else []
    cost = EDIT * len(edits) + (_size(b[n:]) if len(b) > n else 0)
    if a[:n] != b[:n]:
        for i in range(n):
            found = _diff(a[i], b[i], [*path, i])
            edits += found[0]
            cost += found[1]
    if len(a) > n:
        edits.append(["trunc", path, n])
        cost += EDIT
    return edits, cost
