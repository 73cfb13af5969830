"""Loading a transformers model once, and running one packed forward pass per step."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from safetensors import SafetensorError
from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM, AutoTokenizer

from engine.config import EngineConfig
from engine.kernels import paged_kernel
from engine.kv_cache import ATTN_IMPLEMENTATION, KVCache, build_context, check_pool_fits, paged_attention, pool_bytes
from engine.request import Request
from engine.speculation import verify

AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention)


class ModelLoadError(ValueError):
    """The model named in EngineConfig.model cannot serve in this engine."""


@dataclass
class LoadedModel:
    """A model and tokenizer shared by every engine in the process (weights are read-only)."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    eos_token_ids: frozenset[int]
    max_position_embeddings: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    _texts: dict[int, str] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.model.get_input_embeddings().num_embeddings

    def token_text(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self.tokenizer.decode([token_id])
        return text

    def text_of(self, token_ids: list[int]) -> str:
        return "".join(self.token_text(t) for t in token_ids)


_loaded: dict[tuple[str, str, str], LoadedModel] = {}
_load_lock = threading.Lock()


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device must be 'cpu' or 'auto' on this machine; got 'cuda' but no CUDA GPU is visible")
    return torch.device(device)


def load_model(name: str, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """Load (once per process) a decoder-only causal LM whose attention we can page."""
    dev = resolve_device(device)
    key = (name, str(dev), dtype)
    with _load_lock:
        if key not in _loaded:
            _loaded[key] = _load(name, dev, getattr(torch, dtype))
        return _loaded[key]


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """One quick request to the Hugging Face hub. Without it, an id that is not cached on an
    offline machine waits out the hub client's retries (over 20 s) before failing."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=timeout_s)
    except urllib.error.HTTPError:
        return True  # the hub answered, if not with 200
    except (OSError, ValueError):
        return False
    return True


def _load(name: str, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    def fail(reason: str) -> ModelLoadError:
        return ModelLoadError(f"model {name!r} cannot be used: {reason}")

    local = os.path.isdir(name)
    offline = local or not hub_reachable()  # then a hub id is read from the local cache only
    if local:
        _refuse_code(name, fail)
    hf_config = _config(name, local, offline, fail)
    model = _causal_lm(name, dtype, offline, fail)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False, local_files_only=offline)
    except (OSError, ValueError) as exc:
        raise fail(f"no usable tokenizer ({str(exc).splitlines()[0]})") from exc
    model.to(device).eval()
    text_config = hf_config.get_text_config()
    heads = text_config.num_attention_heads
    head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // heads
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    eos_ids = frozenset([] if eos is None else [eos] if isinstance(eos, int) else eos)
    return LoadedModel(
        name=name, model=model, tokenizer=tokenizer, device=device, eos_token_ids=eos_ids,
        max_position_embeddings=getattr(text_config, "max_position_embeddings", 2048),
        num_layers=text_config.num_hidden_layers,
        num_kv_heads=getattr(text_config, "num_key_value_heads", None) or heads, head_dim=head_dim)


def _refuse_code(folder: str, fail: Callable[[str], ModelLoadError]) -> None:
    """A folder whose configs name Python classes of their own (auto_map) would run its code to load:
    the lab never does, so it refuses the folder by name, before transformers could ask (issue 32)."""
    for file in ("config.json", "tokenizer_config.json"):
        path = os.path.join(folder, file)
        try:
            with open(path, encoding="utf-8") as f:
                asks = "auto_map" in json.load(f)
        except (OSError, ValueError):
            continue  # missing or unreadable: the loaders below say so
        if asks:
            raise fail(f"its {file} names code of its own to run (auto_map); the lab never runs code from a "
                       "model folder")


def _config(name: str, local: bool, offline: bool, fail: Callable[[str], ModelLoadError]):
    """The model's transformers config: found, and of a decoder-only model."""
    # A hub id is "name" or "org/name"; anything else can only have meant a folder.
    if not local and (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1):
        raise fail("not found: there is no folder at that path")
    if local and not os.path.isfile(os.path.join(name, "config.json")):
        raise fail("the folder has no config.json, so it holds no transformers model")
    try:
        hf_config = AutoConfig.from_pretrained(name, trust_remote_code=False, local_files_only=offline)
    except (OSError, ValueError) as exc:
        where = "it is not in the local Hugging Face cache and the hub cannot be reached from this machine" \
            if offline else "it could not be loaded as a Hugging Face hub id"
        raise fail(f"not found: no local folder of that name, and {where} ({str(exc).splitlines()[0]})") from exc
    if getattr(hf_config, "is_encoder_decoder", False):
        raise fail("it is an encoder-decoder model; the engine serves decoder-only causal LMs")
    return hf_config


def _causal_lm(name: str, dtype: torch.dtype, offline: bool, fail: Callable[[str], ModelLoadError]):
    """The weights, as a causal LM whose attention the engine can page."""
    try:
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=dtype, attn_implementation=ATTN_IMPLEMENTATION, trust_remote_code=False,
            local_files_only=offline)
    except ValueError as exc:
        raise fail(f"it is not a causal LM, or its attention cannot be paged ({str(exc).splitlines()[0]})") from exc
    except (OSError, SafetensorError) as exc:  # missing, unreadable, or a truncated or corrupt file
        raise fail(f"its weights could not be read ({str(exc).splitlines()[0]})") from exc
    if not getattr(model, "_supports_attention_backend", False):
        raise fail(f"{type(model).__name__} does not route attention through transformers' "
                   "AttentionInterface, so its KV cache cannot be paged")
    if not all(m.is_causal for m in model.modules() if hasattr(m, "is_causal")):
        raise fail(f"{type(model).__name__} attends in both directions (an encoder, such as BERT); the engine "
                   "serves decoder-only causal LMs, where each token sees only the tokens before it")
    return model


class ModelRunner:
    """Owns this engine's KV pool and turns a scheduled batch into next tokens."""

    def __init__(self, loaded: LoadedModel, config: EngineConfig):
        self.loaded = loaded
        self.seed = config.seed
        check_pool_fits(pool_bytes(loaded, config), loaded.device, config)
        self.cache = KVCache(
            loaded.num_layers, loaded.num_kv_heads, loaded.head_dim, config.block_size, config.num_gpu_blocks,
            config.num_cpu_blocks, loaded.model.dtype, loaded.device)
        # The compiled kernel where the operator asked for it and it can serve (engine/kernels/), else None.
        self.kernel = paged_kernel(loaded.device.type, str(loaded.model.dtype).removeprefix("torch."))

    def copy_pages(self, swaps: list[tuple[str, list[tuple[int, int]]]]) -> None:
        """Swap preemption's page copies, in the order the scheduler decided them: ("out", [(gpu, cpu)])
        or ("in", [(cpu, gpu)])."""
        for direction, pairs in swaps:
            (self.cache.swap_out if direction == "out" else self.cache.swap_in)(pairs)

    @torch.inference_mode()
    def execute(self, batch: list[tuple[Request, int, list[int], list[int]]]) -> dict[str, list[int]]:
        """Run one forward pass over every scheduled token: (request, tokens, block table, the draft tokens
        its tokens end with). Returns the tokens each request whose scheduled tokens reach its end appends:
        one, or with drafts, those the model agrees with and one more (engine/speculation.py). A partial
        prefill chunk samples nothing."""
        device = self.loaded.device
        ids, seqs, kept, verifying = [], [], [], []
        row = 0
        for req, n, table, drafts in batch:
            start = req.num_computed_tokens
            ids.extend(req.token_ids(start, start + n - len(drafts)))
            ids.extend(max(d, 0) for d in drafts)  # a placeholder slot computes token 0, and is never kept
            seqs.append((start, n, table))
            row += n
            if start + n - len(drafts) == req.num_tokens:  # logits at its last token and after each draft
                verifying.append((req, drafts, len(kept)))
                kept.extend(range(row - 1 - len(drafts), row))
        ctx = build_context(self.cache, seqs, device, self.kernel)
        out = self.loaded.model(
            input_ids=torch.tensor([ids], device=device), position_ids=ctx.positions[None],
            logits_to_keep=torch.tensor(kept, dtype=torch.long, device=device), use_cache=False,
            paged_context=ctx)
        logits = out.logits[0]
        # One argmax for the whole batch serves every greedy request (one device sync, not one each).
        greedy = logits.argmax(dim=-1).tolist()

        def picker(req: Request, first: int) -> Callable[[int], int]:  # the token after j drafts
            if req.sampling.temperature == 0:
                return lambda j: greedy[first + j]
            return lambda j: self._sample(req, logits[first + j].float(), j)

        return {req.request_id: verify(drafts, picker(req, first)) for req, drafts, first in verifying}

    def _sample(self, req: Request, logits: torch.Tensor, ahead: int = 0) -> int:
        """Draw from the temperature-scaled (and top-p truncated) distribution the token `ahead` places
        after its newest (more than 0 only when verifying drafts)."""
        params = req.sampling
        # A generator seeded by (request seed, output index) makes each draw independent of
        # batch composition and history, so preemption, time travel and A/B runs agree.
        base = params.seed if params.seed is not None else self.seed * 1_000_003 + req.arrival_index
        # Folded into 64 bits: torch takes no more, and the sidebar's largest seed (2**31 - 1) times
        # these multipliers overflowed it (issue 32); every seed that worked before draws the same.
        gen = torch.Generator().manual_seed((base * 1_000_033 + len(req.output_token_ids) + ahead) % 2**64)
        probs = torch.softmax(logits / params.temperature, dim=-1).cpu()
        if params.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            outside = sorted_probs.cumsum(0) - sorted_probs > params.top_p
            sorted_probs[outside] = 0.0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=gen))
