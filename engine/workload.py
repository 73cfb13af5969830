"""Workloads: the requests a run replays, from a file, a preset or a seeded generator.

A workload is a list of ``WorkloadItem``s, each one future ``add_request`` call.
Files are JSON Lines (one object per line) or CSV with a header row; both hold
the same six fields, and ``dump_workload`` writes what ``parse_workload`` reads.
A bad file never half-loads: the first problem raises ``WorkloadError`` naming
the line and the field, so the lab can show it and keep the workload it had.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import typing
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.config import SamplingParams
from engine.limits import MAX_ARRIVAL_MS, MAX_PROMPT_TOKENS, MAX_REQUESTS, MAX_STEPS
from engine.values import parse

if TYPE_CHECKING:
    from engine.load import RateSpec, TraceSpec

FORMATS = ("jsonl", "csv")


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


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


# field -> (accepts the value?, what it must be). One table serves every source of items.
_RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "prompt": (lambda v: isinstance(v, str) and v.strip() != "", "must be text with at least one non-space character"),
    "max_tokens": (lambda v: _is_int(v) and v >= 1, "must be an integer >= 1"),
    "priority": (_is_int, "must be an integer (lower values are served first under the priority policy)"),
    "arrival_step": (lambda v: _is_int(v) and 0 <= v <= MAX_STEPS, f"must be an integer in [0, {MAX_STEPS}]"),
    "temperature": (lambda v: _is_number(v) and 0 <= v <= 5, "must be a number in [0, 5] (0 means greedy)"),
    "ignore_eos": (lambda v: isinstance(v, bool), "must be true or false"),
    "prompt_tokens": (lambda v: v is None or (_is_int(v) and 1 <= v <= MAX_PROMPT_TOKENS),
                      f"must be empty or a number of tokens in [1, {MAX_PROMPT_TOKENS}] (a synthetic prompt of that "
                      "length)"),
    "length_scale": (lambda v: _is_number(v) and 0 < v <= 1, "must be a fraction in (0, 1]"),
    "arrival_ms": (lambda v: v is None or (_is_number(v) and 0 <= v <= MAX_ARRIVAL_MS),
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
_ITEM_TYPES = typing.get_type_hints(WorkloadItem)


def _known(name: str, what: str) -> str:
    """The valid names, led by the closest one to a misspelt name."""
    close = difflib.get_close_matches(name, FIELDS, n=1)
    return (f"did you mean {close[0]!r}? " if close else "") + f"known {what}: {', '.join(FIELDS)}"


def _item(values: dict, line: int) -> WorkloadItem:
    """Build an item from one line's fields, naming the line in any complaint."""
    for name in values:
        if name not in FIELDS:
            raise WorkloadError(f"unknown field; {_known(name, 'fields')}", line, name)
    if "prompt" not in values:
        raise WorkloadError("missing: every request needs a prompt", line, "prompt")
    try:
        return WorkloadItem(**values)
    except WorkloadError as exc:
        raise WorkloadError(exc.reason, line, exc.field) from None


# ---- files --------------------------------------------------------------------------------


# A workload file's format, told by its name's suffix (for the CLI and the lab's upload alike).
FORMAT_OF_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}


def format_of(file_name: str) -> str | None:
    """'jsonl' or 'csv' for a workload file's name; None where the suffix says neither."""
    return FORMAT_OF_SUFFIX.get(Path(file_name).suffix.lower())


def parse_workload(text: str, fmt: str) -> list[WorkloadItem]:
    """Read a workload file's text; fmt is 'jsonl' or 'csv'. Blank lines are skipped."""
    if fmt not in FORMATS:
        raise WorkloadError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    text = text.removeprefix("\ufeff")  # a byte-order mark, as spreadsheet programs write
    items = _parse_jsonl(text) if fmt == "jsonl" else _parse_csv(text)
    if not items:
        expected = "one JSON object per line" if fmt == "jsonl" else "a header row, then one request per row"
        raise WorkloadError(f"the workload is empty: no requests found (expected {expected})")
    return items


def _check_count(items: list[WorkloadItem], line: int) -> None:
    if len(items) >= MAX_REQUESTS:
        raise WorkloadError(f"more than {MAX_REQUESTS} requests; a lab workload holds at most {MAX_REQUESTS}", line)


def _parse_jsonl(text: str) -> list[WorkloadItem]:
    items: list[WorkloadItem] = []
    # Split on "\n" only: JSON leaves characters such as U+2028 unescaped, and
    # str.splitlines() would break a prompt holding one.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip():
            continue
        try:
            values = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"not valid JSON: {exc.msg} at column {exc.colno}", number) from None
        if not isinstance(values, dict):
            raise WorkloadError(f'expected a JSON object such as {{"prompt": "ROMEO:"}}, got '
                                f"{type(values).__name__}", number)
        _check_count(items, number)
        items.append(_item(values, number))
    return items


def _from_cell(name: str, cell: str) -> object:
    """Turn a CSV cell into its field's type, read as a link or a flag is (engine.values). A cell
    that does not convert stays text, and the field's rule then rejects it with the same message
    a JSON file gets."""
    if name == "prompt":
        return cell
    try:
        return parse(cell, _ITEM_TYPES[name])
    except ValueError:
        return cell


def _parse_csv(text: str) -> list[WorkloadItem]:
    reader = csv.reader(io.StringIO(text, newline=""))
    items: list[WorkloadItem] = []
    header: list[str] | None = None
    start = 1  # the physical line a row starts on (a quoted prompt may span several)
    try:
        for row in reader:
            number, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = [cell.strip() for cell in row]
                _check_header(header, number)
                continue
            if len(row) != len(header):
                raise WorkloadError(f"has {len(row)} cells but the header has {len(header)} columns "
                                    f"({', '.join(header)})", number)
            _check_count(items, number)
            # An empty cell leaves an optional field at its default.
            values = {name: _from_cell(name, cell) for name, cell in zip(header, row, strict=True)
                      if cell.strip() or name == "prompt"}
            items.append(_item(values, number))
    except csv.Error as exc:
        raise WorkloadError(f"not valid CSV: {exc}", start) from None
    return items


def _check_header(header: list[str], line: int) -> None:
    unknown = [name for name in header if name not in FIELDS]
    if unknown:
        raise WorkloadError(f"the header row names unknown column(s) {', '.join(map(shown, unknown[:5]))}; "
                            f"{_known(unknown[0], 'columns')} (a CSV workload must start with a header row)", line)
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise WorkloadError(f"the header row repeats column(s) {', '.join(map(repr, repeated))}", line)
    if "prompt" not in header:
        raise WorkloadError(f"the header row has no 'prompt' column (it has: {', '.join(header)})", line)


def dump_workload(items: list[WorkloadItem], fmt: str) -> str:
    """Write items as a file's text, every field spelled out, that parse_workload reads back."""
    if fmt == "jsonl":
        return "".join(json.dumps(asdict(item), ensure_ascii=False) + "\n" for item in items)
    if fmt == "csv":
        out = io.StringIO(newline="")
        # RFC 4180's "\r\n" line ends: the writer then quotes any prompt holding "\r" or "\n".
        writer = csv.writer(out)
        writer.writerow(FIELDS)
        for item in items:
            writer.writerow([str(v).lower() if isinstance(v, bool) else v for v in asdict(item).values()])
        return out.getvalue()
    raise WorkloadError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")


# ---- presets ------------------------------------------------------------------------------
# Written for the default model, trained on Shakespeare's plays, so prompts are in its
# language. Token counts quoted below are for its tokenizer; verse, with its capitals and
# punctuation, takes nearly two tokens a word.

_SHORT_PROMPTS = [
    "ROMEO:\nBut soft, what light through yonder window breaks?",
    "JULIET:\nO Romeo, Romeo, wherefore art thou Romeo?",
    "HAMLET:\nWhat a piece of work is a man!",
    "MACBETH:\nIs this a dagger which I see before me?",
    "KING LEAR:\nBlow, winds, and crack your cheeks!",
    "PUCK:\nLord, what fools these mortals be!",
    "OTHELLO:\nIt is the cause, it is the cause, my soul.",
    "VIOLA:\nI am not what I am.",
    "PROSPERO:\nWe are such stuff as dreams are made on.",
    "FALSTAFF:\nThe better part of valour is discretion.",
    "BEATRICE:\nI had rather hear my dog bark at a crow,",
    "HENRY V:\nWe few, we happy few, we band of brothers;",
]

_MERCY = """PORTIA:
The quality of mercy is not strained;
It droppeth as the gentle rain from heaven
Upon the place beneath. It is twice blest;
It blesseth him that gives and him that takes.
'Tis mightiest in the mightiest; it becomes
The throned monarch better than his crown.
His sceptre shows the force of temporal power,
The attribute to awe and majesty,
Wherein doth sit the dread and fear of kings;
But mercy is above this sceptred sway;
It is enthroned in the hearts of kings,
It is an attribute to God himself;
And earthly power doth then show likest God's
When mercy seasons justice."""

_TO_BE = """HAMLET:
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles,
And by opposing end them. To die, to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to: 'tis a consummation
Devoutly to be wish'd. To die, to sleep;
To sleep, perchance to dream: ay, there's the rub;
For in that sleep of death what dreams may come,
When we have shuffled off this mortal coil,
Must give us pause: there's the respect
That makes calamity of so long life."""

_SEVEN_AGES = """JAQUES:
All the world's a stage,
And all the men and women merely players;
They have their exits and their entrances,
And one man in his time plays many parts,
His acts being seven ages. At first the infant,
Mewling and puking in the nurse's arms.
Then the whining schoolboy, with his satchel
And shining morning face, creeping like snail
Unwillingly to school. And then the lover,
Sighing like furnace, with a woeful ballad
Made to his mistress' eyebrow. Then a soldier,
Full of strange oaths, and bearded like the pard,
Jealous in honour, sudden and quick in quarrel,
Seeking the bubble reputation
Even in the cannon's mouth. And then the justice,
In fair round belly with good capon lined,
With eyes severe and beard of formal cut,
Full of wise saws and modern instances;
And so he plays his part."""

# About 55 tokens: more than three 16-token pages that every request of the preset shares.
_PREAMBLE = """CHORUS:
O for a Muse of fire, that would ascend
The brightest heaven of invention,
A kingdom for a stage, princes to act
And monarchs to behold the swelling scene!
"""

_QUESTIONS = [
    "KING:\nWhat news from France?",
    "QUEEN:\nWhere is my son?",
    "HERALD:\nThe day is yours.",
    "SOLDIER:\nWho goes there?",
    "LORD:\nHow fares the king?",
    "PAGE:\nMy lord, the horses wait.",
]


def chat_mix() -> list[WorkloadItem]:
    """Short prompts, outputs from a few tokens to many, arriving a few steps apart:
    watch requests join and leave the running batch while decodes keep flowing."""
    lengths = [12, 48, 6, 32, 64, 8, 24, 40]
    arrivals = [0, 0, 2, 3, 5, 8, 9, 12]
    return [WorkloadItem(p, max_tokens=n, arrival_step=a, ignore_eos=i % 2 == 0)
            for i, (p, n, a) in enumerate(zip(_SHORT_PROMPTS[:8], lengths, arrivals, strict=True))]


def chats_and_speeches() -> list[WorkloadItem]:
    """Short chats and three long speeches in the first ten steps: within 20 steps a prompt is
    split to fit the token budget, the pool fills, and a speech waits for pages.

    The lab's first workload, so that each of the scheduler's limits shows early: at step 2 two
    speeches (about 440 tokens) outgrow the 256-token budget and the second runs in chunks; the
    pool fills to 54 of its 64 pages; from step 10 the last speech waits for pages while the
    decodes keep flowing. Its first-token time moves with the budget (p50 6.5 steps at 64 tokens,
    1 at 256), where chat_mix's stays at 1."""
    short = [(0, 24, 0), (1, 40, 0), (2, 16, 1), (3, 24, 3), (4, 48, 6), (5, 12, 8)]
    items = [WorkloadItem(_SHORT_PROMPTS[i], max_tokens=n, arrival_step=a, ignore_eos=True) for i, n, a in short]
    items += [WorkloadItem(speech, max_tokens=n, arrival_step=a, ignore_eos=True)
              for speech, n, a in ((_SEVEN_AGES, 32, 2), (_TO_BE, 32, 2), (_MERCY, 40, 5), (_SEVEN_AGES, 32, 10))]
    return sorted(items, key=lambda item: item.arrival_step)


def long_prompts() -> list[WorkloadItem]:
    """Three long speeches (about 175, 195 and 245 tokens) beside short prompts: with a
    small token budget and chunked prefill, long prompts run in chunks while the
    short requests keep decoding; without chunking, they stall everyone behind them."""
    items = [WorkloadItem(p, max_tokens=24, arrival_step=a, ignore_eos=True)
             for p, a in zip(_SHORT_PROMPTS[:5], [0, 0, 1, 2, 3], strict=True)]
    for long, a in ((_SEVEN_AGES, 1), (_MERCY, 4), (_TO_BE, 6)):
        items.append(WorkloadItem(long, max_tokens=32, arrival_step=a, ignore_eos=True))
    return sorted(items, key=lambda item: item.arrival_step)


def shared_system_prompt() -> list[WorkloadItem]:
    """One ~55-token preamble, then a different line each: with prefix caching on, later
    requests reuse the preamble's full pages instead of computing them again."""
    return [WorkloadItem(_PREAMBLE + q, max_tokens=24, arrival_step=2 * i, ignore_eos=True)
            for i, q in enumerate(_QUESTIONS)]


def burst() -> list[WorkloadItem]:
    """Sixteen requests at step 0 whose full lengths (about 1,400 tokens) outgrow the
    default 64-page pool of 16-token pages: running requests must be preempted."""
    k = len(_SHORT_PROMPTS)
    return [WorkloadItem(f"{_SHORT_PROMPTS[i % k]}\n{_SHORT_PROMPTS[(i + 5) % k]}", max_tokens=48 + 4 * (i % 5),
                         ignore_eos=True) for i in range(16)]


def mixed_priorities() -> list[WorkloadItem]:
    """Long, low-priority jobs (priority 2) start first; urgent short requests (priority 0)
    arrive later. Under scheduling_policy='priority' with a small max_num_seqs or pool,
    the urgent ones jump the queue and can preempt the long jobs."""
    items = [WorkloadItem(p, max_tokens=96, priority=2, arrival_step=0, ignore_eos=True)
             for p in (_MERCY, _SHORT_PROMPTS[3], _SHORT_PROMPTS[4])]
    items += [WorkloadItem(_SHORT_PROMPTS[5 + i], max_tokens=12, priority=0 if i % 2 == 0 else 1,
                           arrival_step=4 + 3 * i, ignore_eos=True) for i in range(5)]
    return items


PRESETS: dict[str, Callable[[], list[WorkloadItem]]] = {
    "chats_and_speeches": chats_and_speeches,
    "chat_mix": chat_mix,
    "long_prompts": long_prompts,
    "shared_system_prompt": shared_system_prompt,
    "burst": burst,
    "mixed_priorities": mixed_priorities,
}


# ---- generator ----------------------------------------------------------------------------

_WORDS = (
    "thou", "thee", "thy", "thine", "hath", "doth", "art", "shall", "would", "noble", "gentle", "sweet", "fair",
    "good", "lord", "lady", "king", "queen", "prince", "duke", "knight", "soldier", "fool", "love", "heart", "soul",
    "grief", "joy", "night", "day", "sun", "moon", "star", "heaven", "earth", "sea", "storm", "crown", "sword",
    "blood", "honour", "death", "life", "time", "world", "dream", "sleep", "tears", "eyes", "hand", "tongue",
    "speak", "hear", "see", "come", "go", "stay", "fly", "weep", "laugh", "swear", "pray", "fight", "yield", "rest",
    "villain", "friend", "brother", "sister", "father", "mother", "daughter", "son", "gold", "poison", "letter",
    "ring", "garden", "tower", "castle", "forest", "battle", "war", "peace", "mercy", "justice", "truth", "false",
    "true", "dear", "cruel", "proud", "poor", "brave", "wise", "mad", "strange",
)
_SPEAKERS = ("ROMEO", "JULIET", "HAMLET", "OPHELIA", "MACBETH", "LEAR", "PORTIA", "IAGO", "ROSALIND", "PUCK")
# Prompts are built from words, not tokens, so their token counts are approximate. The
# default model's tokenizer spends about this many tokens on one of these words (with its
# space), and about HEADING_TOKENS on the start-of-text token and a speaker heading like
# "ROMEO:\n". A byte-level tokenizer spends about five tokens a word.
TOKENS_PER_WORD = 1.1
HEADING_TOKENS = 5


@dataclass
class GeneratorSpec:
    """A seeded random workload: Poisson arrivals per step and uniform length ranges.

    prompt_tokens and output_tokens are inclusive (low, high) ranges; priorities is
    how many priority levels (0 .. priorities-1) requests are drawn from. Prompt
    lengths are targets: prompts are made of words (see TOKENS_PER_WORD), so their
    real token counts come out near the range, not exactly in it.
    """

    seed: int = 0
    num_requests: int = 12
    arrival_rate: float = 1.0  # mean arrivals per engine step
    prompt_tokens: tuple[int, int] = (8, 96)
    output_tokens: tuple[int, int] = (8, 48)
    priorities: int = 1

    def __post_init__(self) -> None:
        checks = [
            ("seed", _is_int(self.seed) and self.seed >= 0, "an integer >= 0"),
            ("num_requests", _is_int(self.num_requests) and 1 <= self.num_requests <= MAX_REQUESTS,
             f"an integer in [1, {MAX_REQUESTS}]"),
            ("arrival_rate", _is_number(self.arrival_rate) and 0.01 <= self.arrival_rate <= 100,
             "a number of arrivals per step in [0.01, 100]"),
            ("prompt_tokens", _is_range(self.prompt_tokens), "a (low, high) pair of integers, 1 <= low <= high"),
            ("output_tokens", _is_range(self.output_tokens), "a (low, high) pair of integers, 1 <= low <= high"),
            ("priorities", _is_int(self.priorities) and 1 <= self.priorities <= 10, "an integer in [1, 10]"),
        ]
        for name, ok, must in checks:
            if not ok:
                raise ValueError(f"{name} must be {must}; got {getattr(self, name)!r}")
        self.prompt_tokens, self.output_tokens = tuple(self.prompt_tokens), tuple(self.output_tokens)


def _is_range(pair: object) -> bool:
    return isinstance(pair, (tuple, list)) and len(pair) == 2 and all(_is_int(v) for v in pair) \
        and 1 <= pair[0] <= pair[1]


def generate_workload(spec: GeneratorSpec) -> list[WorkloadItem]:
    """Draw spec.num_requests items; the same spec always gives the same items.

    Arrivals are a Poisson process of spec.arrival_rate per step (exponential gaps,
    so each step's count of arrivals is Poisson-distributed), shifted so the first
    request arrives at step 0 and a run never opens with idle steps.
    """
    rng = np.random.default_rng(spec.seed)
    n = spec.num_requests
    times = np.cumsum(rng.exponential(1.0 / spec.arrival_rate, size=n))
    arrivals = np.floor(times - times[0]).astype(int)
    prompt_lens = rng.integers(spec.prompt_tokens[0], spec.prompt_tokens[1] + 1, size=n)
    output_lens = rng.integers(spec.output_tokens[0], spec.output_tokens[1] + 1, size=n)
    priorities = rng.integers(0, spec.priorities, size=n)
    items = []
    for i in range(n):
        num_words = max(1, round((int(prompt_lens[i]) - HEADING_TOKENS) / TOKENS_PER_WORD))
        words = rng.choice(_WORDS, size=num_words)
        speaker = _SPEAKERS[int(rng.integers(len(_SPEAKERS)))]
        text = f"{speaker}:\n" + " ".join(words).capitalize() + "."
        # ignore_eos: the drawn output length is what the request really generates.
        items.append(WorkloadItem(text, max_tokens=int(output_lens[i]), priority=int(priorities[i]),
                                  arrival_step=int(arrivals[i]), ignore_eos=True))
    return items


# ---- where a workload comes from ----------------------------------------------------------


@dataclass(frozen=True)
class WorkloadSource:
    """Where a run's requests come from: a preset, a generator, or a list of requests (a file, a
    lesson's own, a link's). The one definition the lab's sidebar, its links, its lessons and the
    CLI read, for both the requests and what to call them.

    A preset or a generator is named by a link instead of listed; a list is listed."""

    preset: str | None = None
    generator: GeneratorSpec | None = None
    load: TraceSpec | RateSpec | None = None  # a real trace, or requests at a rate (engine/load.py)
    requests: tuple[WorkloadItem, ...] = ()
    name: str = ""  # what a list is called: "file trace.jsonl", "lesson 3"

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise WorkloadError(f"unknown preset {self.preset!r}; presets: {', '.join(PRESETS)}")
        if sum(x is not None for x in (self.preset, self.generator, self.load)) > 1:
            raise WorkloadError("a workload comes from one of a preset, a generator or a load, not several")
        object.__setattr__(self, "requests", tuple(self.requests))

    @property
    def named(self) -> bool:
        """A preset or a generator: a few words rebuild it, so a link names it instead of listing it."""
        return self.preset is not None or self.generator is not None or self.load is not None

    def items(self) -> list[WorkloadItem]:
        if self.preset is not None:
            return PRESETS[self.preset]()
        if self.generator is not None:
            return generate_workload(self.generator)
        if self.load is not None:
            return self.load.items()
        return list(self.requests)

    @property
    def label(self) -> str:
        if self.preset is not None:
            return f"preset {self.preset}"
        if self.generator is not None:
            return f"generated workload (seed {self.generator.seed})"
        if self.load is not None:
            return self.load.label
        return self.name or "workload"


def synthetic_prompt(label: str, num_tokens: int, vocab_size: int) -> list[int]:
    """Token ids standing in for a real prompt of that length: seeded by the label, so the same
    item always gets the same ids, and never id 0 (the default model's end-of-text)."""
    rng = np.random.default_rng(zlib.crc32(label.encode("utf-8")))
    return (rng.integers(1, vocab_size, size=num_tokens)).tolist()


def submit(engine, items: list[WorkloadItem]) -> list[str]:
    """Add every item to the engine as a request; returns their ids in item order."""
    ids = []
    for number, item in enumerate(items, start=1):
        params = SamplingParams(max_tokens=item.max_tokens, temperature=item.temperature,
                                ignore_eos=item.ignore_eos)
        prompt = item.prompt if item.prompt_tokens is None else \
            synthetic_prompt(item.prompt, item.prompt_tokens, engine.loaded.vocab_size)
        try:
            ids.append(engine.add_request(prompt, params, priority=item.priority,
                                          arrival_step=item.arrival_step, arrival_ms=item.arrival_ms,
                                          length_scale=item.length_scale))
        except ValueError as exc:
            raise WorkloadError(f"request {number} could not be added: {exc}") from exc
    return ids
