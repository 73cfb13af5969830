"""Lesson claims: every number a lesson states about its own run, with the reading that backs it.

A lesson's TOML lists ``[[claims]]``: a fragment of its text (``says``) and an expression
(``value``) read off the run's records, such as ``step(5).budget.gpu_blocks_used``. The
test suite runs each lesson and holds every fragment to its value, so the prose cannot drift
from the run. Numbers that are not about the run (a vLLM default, a datasheet rate) are
``[[facts]]`` with the source they come from. A coverage test flags any number or request
id in the text that neither backs.

Expressions are a small, safe subset of Python (no imports, no dunders, no assignment),
evaluated by walking its syntax tree over the names in ``RunView.names``.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine import EngineConfig, StepRecord
from engine.hardware import GPUS, LINK_FRACTION, LINKS, STEP_OVERHEAD_MS, Deployment
from engine.rules import SGLANG_NEW_TOKEN_RATIO
from lab.lessons.rules import sort_ids


@dataclass(frozen=True)
class Claim:
    """A fragment of the lesson's text and the expression its number (or ids, or word) must equal."""

    says: str
    value: str  # an expression; '' when a named test holds the claim instead
    variant: str = "base"
    about: float = 0.0  # absolute tolerance, for "about 48 ms"
    held_by: str = ""  # a test in tests/lab/test_lessons.py that quotes it, for claims needing many runs (a sweep)


@dataclass(frozen=True)
class Fact:
    """A fragment that states something other than this run (an engine's default, a datasheet), and where from."""

    says: str
    source: str


class ClaimError(ValueError):
    """A claim's expression cannot be read, or reads something the run does not have."""


# ---- the run an expression reads ---------------------------------------------------------------


@dataclass
class RunView:
    """One finished run of a lesson variant: its records, the metrics at the end, its knobs, and its siblings."""

    records: tuple[StepRecord, ...]
    metrics: dict
    config: EngineConfig
    siblings: Mapping[str, RunView]  # every variant of the lesson by name, this one included
    lesson: Any = None  # the Lesson: its challenge and knee tables are facts of its own, read here too

    @property
    def deployment(self) -> Deployment | None:
        """The deployment the run is priced on (None: unpriced), for the model's and the GPU's numbers."""
        return Deployment.parse(self.config.deployment) if self.config.deployment else None

    @property
    def last(self) -> StepRecord | None:
        return self.records[-1] if self.records else None

    def step(self, n: int) -> StepRecord:
        if not 0 <= n < len(self.records):
            raise ClaimError(f"the run has steps 0 to {len(self.records) - 1}, not {n}")
        return self.records[n]

    def events(self, kind: str, request: str | None = None) -> list[int]:
        """The steps with an event of this kind (for this request), in order."""
        return [r.step for r in self.records for e in r.events
                if e.kind == kind and (request is None or e.request_id == request)]

    def ids(self, n: int, kind: str) -> list[str]:
        """The requests with an event of this kind in step n, in id order."""
        return sort_ids({e.request_id for e in self.step(n).events if e.kind == kind and e.request_id})

    def batch(self, n: int, *kinds: str) -> list[str]:
        """The requests with work in step n's forward pass (of these kinds, if named), in batch order."""
        return [c.request_id for c in self.step(n).batch if not kinds or c.kind in kinds]

    def tokens(self, n: int, request: str) -> int:
        """How many of the request's tokens step n's forward pass holds (0 if none)."""
        return sum(c.num_tokens for c in self.step(n).batch if c.request_id == request)

    def worked(self, request: str, *kinds: str) -> list[int]:
        """The steps in which the request had work in the forward pass (of these kinds, if named)."""
        return [r.step for r in self.records for c in r.batch
                if c.request_id == request and (not kinds or c.kind in kinds)]

    def free_runs(self, n: int) -> list[int]:
        """The lengths of the runs of adjacent free GPU pages after step n, by page number."""
        taken = {b.block_id for b in self.step(n).blocks if b.device == "gpu"}
        runs, length = [], 0
        for page in range(self.step(n).budget.num_gpu_blocks):
            if page in taken:
                runs, length = runs + [length] * (length > 0), 0
            else:
                length += 1
        return runs + [length] * (length > 0)

    def req(self, request: str) -> dict:
        """The request's end-of-run metrics (ttft_ms, e2e_ms, finish_ms, ...)."""
        for m in self.metrics["requests"]:
            if m["request_id"] == request:
                return m
        raise ClaimError(f"the run has no request {request!r}")

    def run(self, variant: str) -> RunView:
        try:
            return self.siblings[variant]
        except KeyError:
            raise ClaimError(f"the lesson has no variant {variant!r}") from None

    @property
    def names(self) -> dict[str, Any]:
        return {"step": self.step, "events": self.events, "ids": self.ids, "req": self.req, "run": self.run,
                "batch": self.batch, "tokens": self.tokens, "worked": self.worked, "free_runs": self.free_runs,
                "records": self.records, "last": self.last,
                "metrics": self.metrics, "config": self.config, "lesson": self.lesson, "deployment": self.deployment,
                "gpus": GPUS, "links": LINKS, "link_fraction": LINK_FRACTION, "step_overhead_ms": STEP_OVERHEAD_MS,
                "sglang_new_token_ratio": SGLANG_NEW_TOKEN_RATIO, "numbers": _numbers,
                **SAFE_FUNCTIONS}


SAFE_FUNCTIONS: dict[str, Callable] = {"len": len, "sum": sum, "max": max, "min": min, "round": round, "abs": abs,
                                       "sorted": sorted, "any": any, "all": all, "set": set, "int": int,
                                       "range": range}
def _numbers(text: str) -> list[float]:
    """The numbers an engine's own words state (an event's reason), to hold the lesson's to them."""
    return [number for number, _ in numbers_in(text)]


_CALLABLE = {*SAFE_FUNCTIONS.values(), _numbers, RunView.step, RunView.events, RunView.ids, RunView.req, RunView.run,
             RunView.batch, RunView.tokens, RunView.worked, RunView.free_runs, Deployment.step_cost,
             Deployment.swap_ms}
_READ_ONLY_METHODS = {"get", "keys", "values", "items", "count", "index", "startswith", "endswith"}
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
            ast.Is: operator.is_, ast.IsNot: operator.is_not}


def evaluate(expression: str, view: RunView) -> Any:
    """The expression's value on this run. Raises ClaimError for anything outside the subset."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ClaimError(f"{expression!r} is not an expression: {exc.msg}") from None
    return _Walker(view.names, getattr(view, "readers", ())).visit(tree.body)


class _Walker:
    """Evaluates the few node kinds a claim needs; any other node is refused by name. `readers` are the
    view's own functions a claim may call (a fleet lesson's view has others than RunView's)."""

    def __init__(self, names: dict[str, Any], readers: tuple[Callable, ...] = ()):
        self.scopes = [names]
        self.readers = readers

    def visit(self, node: ast.AST) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ClaimError(f"a claim may not use {type(node).__name__}")
        return method(node)

    def _Constant(self, node):
        return node.value

    def _Name(self, node):
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        raise ClaimError(f"unknown name {node.id!r}")

    def _Attribute(self, node):
        if node.attr.startswith("_"):
            raise ClaimError(f"a claim may not read {node.attr!r}")
        return getattr(self.visit(node.value), node.attr)

    def _Subscript(self, node):
        return self.visit(node.value)[self.visit(node.slice)]

    def _Slice(self, node):
        return slice(*(None if p is None else self.visit(p) for p in (node.lower, node.upper, node.step)))

    def _Call(self, node):
        func = self.visit(node.func)
        reads_a_value = type(getattr(func, "__self__", None)) in (dict, list, tuple, str) and \
            func.__name__ in _READ_ONLY_METHODS
        if getattr(func, "__func__", func) not in (*_CALLABLE, *self.readers) and not reads_a_value:
            raise ClaimError(f"a claim may call only its run's readers, {', '.join(SAFE_FUNCTIONS)} and the "
                             f"read-only {', '.join(sorted(_READ_ONLY_METHODS))}")
        return func(*(self.visit(a) for a in node.args), **{k.arg: self.visit(k.value) for k in node.keywords})

    def _BinOp(self, node):
        return _BINARY[type(node.op)](self.visit(node.left), self.visit(node.right))

    def _UnaryOp(self, node):
        if not isinstance(node.op, ast.USub | ast.Not):
            raise ClaimError("only - and not")
        value = self.visit(node.operand)
        return -value if isinstance(node.op, ast.USub) else not value

    def _BoolOp(self, node):
        values = [self.visit(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)

    def _Compare(self, node):
        left = self.visit(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.visit(right_node)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def _List(self, node):
        return [self.visit(e) for e in node.elts]

    _Tuple = _List

    def _ListComp(self, node):
        return list(self._generate(node, 0))  # eager, so each scope is popped before anyone reads on

    _GeneratorExp = _ListComp

    def _generate(self, node, depth: int):
        if depth == len(node.generators):
            yield self.visit(node.elt)
            return
        gen = node.generators[depth]
        if not isinstance(gen.target, ast.Name):
            raise ClaimError("a comprehension's 'for' takes one name")
        for item in self.visit(gen.iter):
            self.scopes.append({gen.target.id: item})
            try:
                if all(self.visit(cond) for cond in gen.ifs):
                    yield from self._generate(node, depth + 1)
            finally:
                self.scopes.pop()


# ---- holding a fragment to its value -----------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w]|\.\d|,\d{3})")
REQUEST_ID = re.compile(r"(?<![\w])r\d+(?![\w])")


def numbers_in(text: str) -> list[tuple[float, int]]:
    """Each number in the text with its printed decimals: '1,024' is (1024, 0), '14.0' is (14.0, 1)."""
    out = []
    for m in NUMBER.finditer(text):
        raw = m.group().replace(",", "")
        out.append((float(raw), len(raw.split(".")[1]) if "." in raw else 0))
    return out


def check(claim: Claim, value: Any) -> str | None:
    """None when the fragment states the value; otherwise what is wrong, in words."""
    if value is True:
        return None
    if value is False or value is None:
        return f"{claim.value!r} is {value} on the run"
    if isinstance(value, list | tuple):
        missing = [v for v in value if check(Claim(claim.says, claim.value, claim.variant, claim.about), v)]
        return f"the text does not state {missing!r} (the run's {list(value)!r})" if missing else None
    if isinstance(value, str):
        found = re.search(rf"(?<![\w]){re.escape(value)}(?![\w])", claim.says)
        return None if found else f"the text does not say {value!r}"
    for number, decimals in numbers_in(claim.says):
        if abs(number - (float(value) if claim.about else round(float(value), decimals))) <= claim.about + 1e-9:
            return None
    shown = f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else value
    return f"the run's value is {shown}" + (f" (±{claim.about:g} allowed)" if claim.about else "")


# ---- coverage: what in the text no claim or fact backs -----------------------------------------

# Not statements about a run: a numbered list's marker, a cross-reference to another lesson, a name
# with a version in it, a deployment's id (`model@gpu`).
_LIST_MARKER = re.compile(r"^(\s*)\d+\. ", re.MULTILINE)
_CROSS_REFERENCE = re.compile(r"[Ll]essons? \d+(?:(?:, | and | or |–)\d+)*"  # lesson 3, lessons 4 and 5
                              r"|Llama \d+(?:\.\d+)*|vLLM \d+\.\d+|`[^`]+@[^`]+`")


def unbacked(text: str, fragments: list[str]) -> list[str]:
    """The numbers and request ids in the text outside every fragment (whitespace aside), list
    markers and cross-references: each one a statement that no claim or fact holds to anything."""
    flat = " ".join(_LIST_MARKER.sub(r"\1- ", text).split())
    covered = [False] * len(flat)
    spans = [m.span() for f in fragments for m in re.finditer(re.escape(" ".join(f.split())), flat)]
    for start, end in spans + [m.span() for m in _CROSS_REFERENCE.finditer(flat)]:
        covered[start:end] = [True] * (end - start)
    return [m.group() for pattern in (NUMBER, REQUEST_ID) for m in pattern.finditer(flat)
            if not all(covered[m.start():m.end()])]
