"""Speculative decoding with n-gram drafts (vLLM's ``ngram`` method, "prompt lookup").

A decode step computes one token per request and reads every weight to do it. Speculation guesses
the next few tokens cheaply, then lets the real model check all the guesses in one forward pass:
the step computes 1 + k tokens for the request instead of 1, and keeps every guess the model agrees
with, plus the model's own next token. A step that reads the weights once can then yield several tokens.

The guesses here need no second model: text repeats itself (code, quoted passages, lists, a model
looping), so the proposer finds the latest n tokens earlier in the request's own text and proposes
the k tokens that followed them there. The verifier keeps a draft only if it is the token the model
itself would have produced at that position, so the output is exactly the output without speculation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PLACEHOLDER = -1  # a draft slot vLLM pads a resumed decode with (never accepted): see Scheduler


@dataclass(frozen=True)
class NgramProposer:
    """vLLM 0.32's NgramProposer: the longest n-gram (from prompt_lookup_max down to prompt_lookup_min
    tokens) that ends the text and also occurs earlier; of its earlier occurrences, the first; and up to
    k of the tokens that followed it there."""

    min_n: int
    max_n: int
    k: int
    max_model_len: int

    def propose(self, tokens: list[int]) -> list[int]:
        total = len(tokens)
        k = min(self.k, self.max_model_len - total)  # never draft past the longest a sequence may be
        if total < self.min_n or k <= 0:
            return []
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            suffix = tokens[total - n:]
            start = next((i for i in range(total - n) if tokens[i:i + n] == suffix), None)
            if start is not None:
                return tokens[start + n:start + n + k]
        return []


def verify(drafts: list[int], sample: Callable[[int], int]) -> list[int]:
    """The tokens a verified step appends: the model's token at each draft position in turn (sample(j):
    the token it picks after j drafts), for as long as it agrees with the draft there, then the first it
    disagrees with, or the token after the last draft if it agreed with all (the bonus token).

    Greedy, the model's token is its argmax, so the output is what decoding one token a step gives.
    Sampled, it is drawn as a step without drafts would draw it; keeping a draft only when the draw equals
    it is the rejection rule for a draft proposed with certainty (vLLM's for n-gram drafts), exact in
    distribution."""
    out = []
    for j in range(len(drafts) + 1):
        out.append(sample(j))
        if j == len(drafts) or out[-1] != drafts[j]:
            return out
    return out
