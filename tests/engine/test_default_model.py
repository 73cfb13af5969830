"""Checks on the shipped default model in engine/default_model/.

Why: the lab runs offline on this model, so the files must load with plain
``transformers`` Auto classes, stay small, and actually have learned
something (a broken or untrained checkpoint would still "run"). The word-list
check uses the ``english-words`` package, independent of our tokenizer and
corpus, so it is not circular.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from english_words import get_english_words_set
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

MODEL_DIR = Path(__file__).parents[2] / "engine" / "default_model"
MAX_FILE_BYTES = 16_000_000
PARAM_RANGE = (3_000_000, 6_000_000)
EVAL_TOKENS = 4096
CHUNK = 256
MARGIN_NATS = 0.5
MIN_WORD_FRACTION = 0.7


@pytest.fixture(scope="module")
def model() -> AutoModelForCausalLM:
    """Load once per module: loading is the slowest part of these tests."""
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(MODEL_DIR).eval()


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """The shipped tokenizer, via the same Auto class the engine uses."""
    return AutoTokenizer.from_pretrained(MODEL_DIR)


@pytest.fixture(scope="module")
def heldout_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """First EVAL_TOKENS tokens of validation-split text the model never trained on."""
    text = (MODEL_DIR / "heldout.txt").read_text()
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]  # no >512 warning
    assert len(ids) >= EVAL_TOKENS, "heldout.txt is too short for the evaluation"
    return ids[:EVAL_TOKENS]


def unigram_entropy(ids: list[int]) -> float:
    """Entropy (nats) of the text's OWN token distribution: an optimistic baseline."""
    counts = Counter(ids)
    total = len(ids)
    return -sum(c / total * math.log(c / total) for c in counts.values())


@torch.no_grad()
def mean_cross_entropy(model: AutoModelForCausalLM, ids: list[int]) -> float:
    """Mean next-token cross-entropy (nats) over independent CHUNK-token windows."""
    chunks = torch.tensor(ids[: len(ids) // CHUNK * CHUNK]).view(-1, CHUNK)
    logits = model(input_ids=chunks).logits[:, :-1]
    targets = chunks[:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1)).item()


def test_size_and_dtype(model: AutoModelForCausalLM) -> None:
    """The model must stay tiny: it ships inside the repo and runs on CPU."""
    n_params = sum(p.numel() for p in model.parameters())
    assert PARAM_RANGE[0] <= n_params <= PARAM_RANGE[1], n_params
    assert model.dtype == torch.float32
    assert (MODEL_DIR / "model.safetensors").stat().st_size <= MAX_FILE_BYTES
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA


def test_tokenizer_special_tokens_and_decoding(tokenizer: PreTrainedTokenizerFast) -> None:
    """The engine relies on eos to stop and on per-token decoding for streaming."""
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.eos_token_id is not None
    ids = tokenizer("O Romeo, thou art", add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    assert "".join(pieces) == "O Romeo, thou art"
    assert " thou" in pieces  # byte-level decoder keeps the leading space


def test_beats_heldout_unigram_entropy(model: AutoModelForCausalLM, heldout_ids: list[int]) -> None:
    """A trained model must predict unseen text far better than word counts do."""
    baseline = unigram_entropy(heldout_ids)
    loss = mean_cross_entropy(model, heldout_ids)
    assert loss <= baseline - MARGIN_NATS, f"model CE {loss:.3f} vs unigram entropy {baseline:.3f}"


def test_greedy_romeo_is_mostly_english(model: AutoModelForCausalLM, tokenizer: PreTrainedTokenizerFast) -> None:
    """Greedy text should be real (if archaic) English words, not token soup."""
    inputs = tokenizer("ROMEO:", return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=40, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    dictionary = get_english_words_set(["web2", "gcide"], lower=True, alpha=True)
    assert len(words) >= 10, text
    known = sum(w in dictionary for w in words) / len(words)
    assert known >= MIN_WORD_FRACTION, f"{known:.0%} dictionary words in {text!r}"
