"""Checkpoint rules: how a question reads its answer off the engine's own StepRecord, and grading.

A checkpoint never stores its answer: it names a rule, such as "the requests preempted
in this step", and the rule reads the answer from the record of the step it asks about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import StepRecord
from engine.request import id_order

BASE = "base"  # the variant every lesson has: its own config, unchanged

# A checkpoint's answer: request ids (sorted list), a number or one of its options.
Answer = list[str] | int | float | str


class AnswerError(ValueError):
    """A student's answer cannot be read as the kind the question asks for."""


# ---- rules: how a checkpoint reads its answer off a StepRecord ---------------------------------


@dataclass(frozen=True)
class Rule:
    """A declarative rule, e.g. {kind = "chunk_tokens", request = "r2"}."""

    kind: str
    request: str | None = None
    event: str | None = None

    @property
    def spec(self) -> RuleKind:
        return RULES[self.kind]

    def describe(self) -> str:
        return self.spec.text.format(request=self.request, event=self.event)

    def read(self, record: StepRecord) -> Answer:
        return self.spec.read(record, self)


@dataclass(frozen=True)
class RuleKind:
    answer: str  # 'ids', 'number' or 'choice'
    text: str  # the rule in words; {request} and {event} are filled in
    read: Callable[[StepRecord, Rule], Answer]
    events: tuple[str, ...] = ()  # event kinds whose reasons explain the answer
    needs: tuple[str, ...] = ()  # fields the rule must name: 'request', 'event'


def _ids(record: StepRecord, kind: str) -> list[str]:
    return sort_ids({e.request_id for e in record.events if e.kind == kind and e.request_id})


def _chunk(record: StepRecord, request: str | None):
    return next((c for c in record.batch if c.request_id == request), None)


def _blocked_limit(record: StepRecord, rule: Rule) -> str:
    limits = [e.data.get("limit") for e in record.events if e.kind == "blocked" and e.request_id == rule.request]
    return limits[0] if limits else "not blocked"


def _prefix_hit(record: StepRecord, rule: Rule) -> int:
    hits = [e.data["prefix_hit_tokens"] for e in record.events if e.kind == "admitted" and e.request_id == rule.request]
    return hits[0] if hits else 0


def _priced(record: StepRecord):
    if record.modeled is None:
        raise AnswerError(f"step {record.step} was not priced: the rule needs a deployment (the 'deployment' knob)")
    return record.modeled


RULES: dict[str, RuleKind] = {
    "admitted_ids": RuleKind(
        "ids", "the requests with an 'admitted' event in this step: they left the waiting queue for the batch",
        lambda rec, rule: _ids(rec, "admitted"), events=("admitted", "blocked")),
    "preempted_ids": RuleKind(
        "ids", "the requests with a 'preempted' event in this step",
        lambda rec, rule: _ids(rec, "preempted"), events=("preempted", "swapped_out")),
    "scheduled_ids": RuleKind(
        "ids", "the requests with tokens in this step's forward pass (the batch)",
        lambda rec, rule: sort_ids({c.request_id for c in rec.batch}), events=("admitted", "blocked", "preempted")),
    "blocked_limit": RuleKind(
        "choice", "the limit named by {request}'s 'blocked' event in this step ('token_budget', 'seq_cap' or "
        "'blocks'), or 'not blocked' if it has none",
        _blocked_limit, events=("blocked", "admitted"), needs=("request",)),
    "rejected_ids": RuleKind(
        "ids", "the requests refused as they arrived in this step (their 'rejected' events: a queue limit, the SLO "
        "admission rule, or too big ever to fit)",
        lambda rec, rule: _ids(rec, "rejected"), events=("rejected",)),
    "finished_ids": RuleKind(
        "ids", "the requests with a 'finished' event in this step: their stop reached the scheduler in it (under "
        "async scheduling, one step after the step that sampled it)",
        lambda rec, rule: _ids(rec, "finished"), events=("finished",)),
    "discarded_ids": RuleKind(
        "ids", "the requests this step's forward pass ran after they had stopped (async scheduling: the stop was "
        "handed back after the step was planned), their tokens thrown away",
        lambda rec, rule: sort_ids({c.request_id for c in rec.batch if c.discarded}), events=("finished",)),
    "accepted_drafts": RuleKind(
        "number", "how many of {request}'s draft tokens the model accepted in this step (0 if it verified none)",
        lambda rec, rule: c.num_accepted if (c := _chunk(rec, rule.request)) else 0, needs=("request",)),
    "draft_tokens": RuleKind(
        "number", "the draft tokens verified in this step's forward pass (budget.draft_tokens)",
        lambda rec, rule: rec.budget.draft_tokens),
    "padded_tokens": RuleKind(
        "number", "the token rows this step's CUDA graph computes on the run's deployment: its tokens padded up "
        "to the next captured size (modeled.padded_tokens)",
        lambda rec, rule: _priced(rec).padded_tokens),
    "tokens_used": RuleKind(
        "number", "the number of tokens in this step's forward pass (budget.tokens_used)",
        lambda rec, rule: rec.budget.tokens_used),
    "decode_tokens": RuleKind(
        "number", "the number of decode tokens in this step's forward pass (budget.decode_tokens)",
        lambda rec, rule: rec.budget.decode_tokens),
    "chunk_tokens": RuleKind(
        "number", "how many of {request}'s tokens this step's forward pass computes (0 if it is not in the batch)",
        lambda rec, rule: c.num_tokens if (c := _chunk(rec, rule.request)) else 0,
        events=("admitted", "chunk_scheduled", "blocked"), needs=("request",)),
    "chunk_kind": RuleKind(
        "choice", "the kind of work {request} does in this step's batch: 'prefill', 'prefill_chunk', 'decode', "
        "'recompute_prefill', or 'none' if it is not in the batch",
        lambda rec, rule: c.kind if (c := _chunk(rec, rule.request)) else "none",
        events=("admitted", "chunk_scheduled", "blocked", "recompute_started"), needs=("request",)),
    "blocks_swapped": RuleKind(
        "number", "the KV pages copied between GPU and CPU memory in this step (swapped_out plus swapped_in)",
        lambda rec, rule: sum(len(e.data.get("blocks", ())) for e in rec.events
                              if e.kind in ("swapped_out", "swapped_in")),
        events=("preempted", "swapped_out", "swapped_in")),
    "recomputed_tokens": RuleKind(
        "number", "the tokens whose KV pages a preemption dropped and that this step starts computing again (its "
        "'recompute_started' events; the same count as the engine's num_recomputed_tokens)",
        lambda rec, rule: sum(e.data["tokens"] for e in rec.events if e.kind == "recompute_started"),
        events=("recompute_started", "admitted")),
    "event_count": RuleKind(
        "number", "the number of '{event}' events in this step",
        lambda rec, rule: sum(e.kind == rule.event for e in rec.events), needs=("event",)),
    "prefix_hit_tokens": RuleKind(
        "number", "the prompt tokens of {request} served from the prefix cache when it was admitted in this step",
        _prefix_hit, events=("admitted",), needs=("request",)),
    "shared_blocks": RuleKind(
        "number", "the GPU pages more than one request points to after this step (ref_count above 1)",
        lambda rec, rule: sum(b.device == "gpu" and b.ref_count > 1 for b in rec.blocks), events=("admitted",)),
    "request_blocks": RuleKind(
        "number", "the KV pages {request} holds after this step",
        lambda rec, rule: v.num_blocks if (v := rec.requests.get(rule.request)) else 0,
        events=("admitted", "blocked"), needs=("request",)),
    "modeled_ms": RuleKind(
        "number", "the modeled time of this step's forward pass on the run's deployment, in ms "
        "(modeled.total_ms)",
        lambda rec, rule: round(_priced(rec).total_ms, 2)),
    "bound": RuleKind(
        "choice", "what limits this step on the run's deployment: 'memory' (reading weights and KV) or "
        "'compute' (the tensor cores) (modeled.bound)",
        lambda rec, rule: _priced(rec).bound),
    "swap_ms": RuleKind(
        "number", "the modeled ms this step spends copying KV pages over the host link (modeled.swap_ms)",
        lambda rec, rule: round(_priced(rec).swap_ms, 3), events=("swapped_out", "swapped_in")),
    "clock_ms": RuleKind(
        "number", "the modeled clock when this step ends, in ms (modeled.clock_ms)",
        lambda rec, rule: round(_priced(rec).clock_ms, 1)),
    "waiting_count": RuleKind(
        "number", "the requests in the waiting queue after this step (stats.num_requests_waiting)",
        lambda rec, rule: rec.stats.num_requests_waiting, events=("blocked",)),
}


# ---- checkpoints and grading -------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A question asked BEFORE step ``at_step`` runs (the history ends at at_step - 1)."""

    id: str
    at_step: int
    question: str
    rule: Rule
    options: tuple[str, ...] = ()  # the choices, or the request ids to pick from
    explain: str = ""  # the lesson's own words on why, shown after the reveal
    variant: str = BASE
    tolerance: float = 0.0  # a number answer within this fraction of the engine's counts as right

    @property
    def kind(self) -> str:
        """'ids' (a set of request ids), 'number' or 'choice' (one of the options)."""
        return self.rule.spec.answer

    def answer_from(self, record: StepRecord) -> Answer:
        """The right answer, read off the engine's record of step at_step."""
        if record.step != self.at_step:
            raise ValueError(f"checkpoint {self.id!r} is about step {self.at_step}, not step {record.step}")
        return self.rule.read(record)

    def parse(self, value: Any) -> Answer:
        """Read a student's answer (text, a number, a list of ids) as this question's kind."""
        if self.kind == "ids":
            items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
            ids = sort_ids({str(i).strip() for i in items})
            unknown = [i for i in ids if self.options and i not in self.options]
            if unknown:
                raise AnswerError(f"unknown request id(s) {', '.join(unknown)}; pick from {', '.join(self.options)}")
            return ids
        if self.kind == "number":
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise AnswerError(f"the answer must be a number; got {value!r}") from None
            return int(number) if number.is_integer() else number
        if str(value) not in self.options:
            raise AnswerError(f"the answer must be one of {', '.join(self.options)}; got {value!r}")
        return str(value)


@dataclass
class Grade:
    correct: bool
    right_answer: Answer
    explanation: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def sort_ids(ids: set[str] | list[str]) -> list[str]:
    """Request ids in natural order: r2 before r10."""
    return sorted(ids, key=id_order)


def format_answer(answer: Answer) -> str:
    if isinstance(answer, list):
        return ", ".join(answer) if answer else "none"
    return str(answer)


def grade(checkpoint: Checkpoint, record: StepRecord, user_answer: Any) -> Grade:
    """Compare the student's answer with the engine's; raises AnswerError if it cannot be read."""
    right = checkpoint.answer_from(record)
    given = checkpoint.parse(user_answer)
    if checkpoint.kind == "number" and checkpoint.tolerance:
        correct = abs(given - right) <= checkpoint.tolerance * abs(right)
    else:
        correct = given == right
    verdict = "Right" if correct else f"Not quite: you said {format_answer(given)}"
    if checkpoint.tolerance:
        verdict += f" (within {checkpoint.tolerance:.0%} counts)"
    lines = [f"{verdict}. The engine's answer: {format_answer(right)}.",
             f"Rule: {checkpoint.rule.describe()}.", f"Step {record.step} ran {describe_batch(record)}."]
    rule = checkpoint.rule
    lines += [f"- {e.kind} {e.request_id or ''}: {e.reason}".replace("  ", " ") for e in record.events
              if e.kind in rule.spec.events and (rule.request is None or e.request_id == rule.request)]
    if checkpoint.explain:
        lines.append(checkpoint.explain)
    return Grade(correct, right, "\n".join(lines))


def reasons_markdown(result: Grade) -> str:
    """A grade's explanation after its first line (the verdict, which a page says its own way), as
    Markdown paragraphs with the '- ' lines of the engine's reasons kept together as one list."""
    lines = result.explanation.split("\n")[1:]
    return "\n".join(line if line.startswith("- ") else f"\n{line}\n" for line in lines)


def describe_batch(record: StepRecord) -> str:
    b = record.budget
    if not record.batch:
        return "no forward pass (idle)"
    work = ", ".join(f"{c.request_id} {c.kind} ({c.num_tokens} token{'s' * (c.num_tokens != 1)})"
                     for c in record.batch)
    return (f"{work}: {b.tokens_used} of {b.token_budget} budget tokens, {b.seqs_used} of {b.seq_cap} seats, "
            f"{b.gpu_blocks_used} of {b.num_gpu_blocks} KV pages in use after it")
