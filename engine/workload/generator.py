"""A seeded random workload: Poisson arrivals per step and uniform length ranges."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.limits import MAX_GENERATED_TOKENS, MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, MAX_REQUESTS
from engine.workload.item import WorkloadItem, is_int, is_number

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
            ("seed", is_int(self.seed) and self.seed >= 0, "an integer >= 0"),
            ("num_requests", is_int(self.num_requests) and 1 <= self.num_requests <= MAX_REQUESTS,
             f"an integer in [1, {MAX_REQUESTS}]"),
            ("arrival_rate", is_number(self.arrival_rate) and 0.01 <= self.arrival_rate <= 100,
             "a number of arrivals per step in [0.01, 100]"),
            ("prompt_tokens", _is_range(self.prompt_tokens, MAX_PROMPT_TOKENS),
             f"a (low, high) pair of integers, 1 <= low <= high <= {MAX_PROMPT_TOKENS}"),
            ("output_tokens", _is_range(self.output_tokens, MAX_OUTPUT_TOKENS),
             f"a (low, high) pair of integers, 1 <= low <= high <= {MAX_OUTPUT_TOKENS}"),
            ("priorities", is_int(self.priorities) and 1 <= self.priorities <= 10, "an integer in [1, 10]"),
        ]
        for name, ok, must in checks:
            if not ok:
                raise ValueError(f"{name} must be {must}; got {getattr(self, name)!r}")
        most = self.num_requests * self.prompt_tokens[1]
        if most > MAX_GENERATED_TOKENS:
            raise ValueError(f"{self.num_requests} requests of up to {self.prompt_tokens[1]:,} prompt tokens could "
                             f"total {most:,} tokens; a generated workload may total {MAX_GENERATED_TOKENS:,} (fewer "
                             "requests or shorter prompts)")
        self.prompt_tokens, self.output_tokens = tuple(self.prompt_tokens), tuple(self.output_tokens)


def _is_range(pair: object, high: int) -> bool:
    return isinstance(pair, (tuple, list)) and len(pair) == 2 and all(is_int(v) for v in pair) \
        and 1 <= pair[0] <= pair[1] <= high


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
