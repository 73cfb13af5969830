"""Shared fixtures: tiny models built here, so the engine tests need no download."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]


def save_byte_tokenizer(path: Path) -> None:
    """A 256-symbol byte-level tokenizer plus an end token: enough to round-trip any text."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<eos>"])
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>").save_pretrained(path)


def save_model(model: torch.nn.Module, path: Path) -> str:
    model.save_pretrained(path)
    save_byte_tokenizer(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> str:
    """A random 2-layer Llama with grouped-query attention. A wide init spreads the logits,
    so greedy ties (where float noise could flip argmax) are vanishingly rare."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         initializer_range=0.2, bos_token_id=None, eos_token_id=256)
    return save_model(LlamaForCausalLM(config), tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def lab_model(tiny_llama) -> str:
    """The model the app tests serve: the shipped default where it is present (as in CI), else the tiny one."""
    from engine import DEFAULT_MODEL

    return DEFAULT_MODEL if (Path(DEFAULT_MODEL) / "model.safetensors").exists() else tiny_llama


@pytest.fixture(scope="module")
def loaded():
    """The embedded default model the lessons are written for (their token counts are its tokenizer's)."""
    from engine import DEFAULT_MODEL, load_model

    if not (Path(DEFAULT_MODEL) / "model.safetensors").exists():
        pytest.fail(f"the default model is missing from {DEFAULT_MODEL}; lessons are written for it")
    return load_model(DEFAULT_MODEL)
