"""What a step would cost on real hardware: a roofline model of one forward pass on a named deployment.

The engine runs a tiny model on this machine; that decides the tokens and fills the
real KV pool. A Deployment prices each real step as it would run with a production
model on a production GPU, so the lab's clock teaches the right physics: decode is
bound by reading the weights (64 decodes cost about what one does), a prefill chunk
rides along almost free until the step crosses the ridge point, and a swap costs
what the host link makes it cost.

    dep = Deployment(model="llama-3.1-8b", gpu="h100-sxm")
    cost = dep.step_cost([(num_new_tokens, num_context_tokens), ...])  # one pair per scheduled request
    cost.total_ms, cost.parts, cost.bound, cost.mfu, cost.mbu
    dep.swap_ms(num_tokens), dep.kv_bytes_per_token, dep.kv_capacity_tokens(0.9)

Each part is a roofline, max(FLOPs / achievable FLOP/s, bytes / achievable bytes/s).
The achievable fractions are fitted to published measurements: the compute fraction to
operator-level bf16 matmuls, the bandwidth fraction to decode steps (the points and their
sources are data, engine/calibration.json; tests/engine/test_hardware.py holds the model to
each point's stated tolerance, and to the end-to-end points kept apart as validation).
What the model leaves out is listed in the README ("Modeled costs").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.cudagraph import dispatch

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelShape:
    """The numbers that decide a decoder's cost: its weights, its KV cache and its FLOPs per token."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated: bool = True  # SwiGLU (gate, up and down projections) rather than a two-matrix MLP

    @property
    def layer_params(self) -> int:
        """Weight-matmul parameters of one layer: q, k, v, o and the MLP."""
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_o + k_v + (3 if self.gated else 2) * self.hidden * self.intermediate

    @property
    def lm_head_params(self) -> int:
        return self.hidden * self.vocab


# Shapes from each model's config.json on the Hugging Face hub.
MODELS: dict[str, ModelShape] = {
    "llama-2-7b": ModelShape(32, 4096, 32, 32, 128, 11008, 32000),  # meta-llama/Llama-2-7b-hf
    "llama-3-8b": ModelShape(32, 4096, 32, 8, 128, 14336, 128256),  # meta-llama/Meta-Llama-3-8B
    "llama-3.1-8b": ModelShape(32, 4096, 32, 8, 128, 14336, 128256),  # meta-llama/Llama-3.1-8B
    "llama-3-70b": ModelShape(80, 8192, 64, 8, 128, 28672, 128256),  # meta-llama/Meta-Llama-3-70B
    "llama-3.1-70b": ModelShape(80, 8192, 64, 8, 128, 28672, 128256),  # meta-llama/Llama-3.1-70B
    "mistral-7b": ModelShape(32, 4096, 32, 8, 128, 14336, 32768),  # mistralai/Mistral-7B-v0.3
    "qwen2.5-7b": ModelShape(28, 3584, 28, 4, 128, 18944, 152064),  # Qwen/Qwen2.5-7B
    "qwen2.5-72b": ModelShape(80, 8192, 64, 8, 128, 29568, 152064),  # Qwen/Qwen2.5-72B
}


@dataclass(frozen=True)
class GPU:
    """Peak dense bf16 tensor FLOP/s, memory bandwidth and size (vendor datasheets), and the
    fractions of those peaks a serving engine achieves (fitted, see engine/calibration.json)."""

    flops: float  # dense bf16/fp16 tensor FLOP/s, no sparsity
    bandwidth: float  # HBM/GDDR bytes/s
    memory: float  # bytes
    link: str  # the default host link, for swap
    peer_bandwidth: float  # GPU-to-GPU bytes/s per direction (NVLink, Infinity Fabric; PCIe without)
    compute_fraction: float
    bandwidth_fraction: float

    def roofline_ms(self, flops: float, nbytes: float) -> tuple[float, bool]:
        """ms of one kernel's work at the achievable rates, and whether compute (not memory) sets it."""
        compute = flops / (self.flops * self.compute_fraction) * 1e3
        memory = nbytes / (self.bandwidth * self.bandwidth_fraction) * 1e3
        return max(compute, memory), compute > memory


GB = 1e9
# (compute, bandwidth) fractions of peak, fitted to the points in engine/calibration.json.
# Compute: Hopper's large bf16 matmuls measure 64-80% of peak (OpenXLA's table, MAMF), 0.75 fits
# them; Ampere has only MAMF's best-shape ceilings (82-86%), and 0.80 sits under them by about
# what Hopper's model-sized shapes sit under its ceiling. Bandwidth: decode steps of 7-8B models
# on both generations read their weights at 68% of peak (vLLM's and gpt-fast's).
# GPUs without a point of their own take a generation's fractions, said on each line below.
AMPERE, HOPPER = (0.80, 0.68), (0.75, 0.68)
GPUS: dict[str, GPU] = {
    # NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): 312 TFLOPS bf16, 1,555 / 2,039 GB/s.
    "a100-40gb": GPU(312e12, 1555 * GB, 40 * GB, "pcie-gen4", 300 * GB, *AMPERE),  # uncalibrated: the 80 GB's
    "a100-80gb": GPU(312e12, 2039 * GB, 80 * GB, "pcie-gen4", 300 * GB, *AMPERE),
    # NVIDIA H100 datasheet: SXM 989 TFLOPS bf16 dense (1,979 with sparsity), 3.35 TB/s; PCIe 756, 2.0 TB/s
    # (the PCIe card is uncalibrated: the SXM's fractions).
    "h100-sxm": GPU(989e12, 3350 * GB, 80 * GB, "pcie-gen5", 450 * GB, *HOPPER),
    "h100-pcie": GPU(756e12, 2000 * GB, 80 * GB, "pcie-gen5", 300 * GB, *HOPPER),
    # NVIDIA H200 datasheet: 989 TFLOPS bf16 dense, 4.8 TB/s, 141 GB (uncalibrated: Hopper's fractions).
    "h200": GPU(989e12, 4800 * GB, 141 * GB, "pcie-gen5", 450 * GB, *HOPPER),
    # NVIDIA L4 datasheet: 121 TFLOPS bf16 dense (242 with sparsity), 300 GB/s, 24 GB
    # (uncalibrated: Ampere's fractions).
    "l4": GPU(121e12, 300 * GB, 24 * GB, "pcie-gen4", 31.5 * GB, *AMPERE),
    # NVIDIA L40S datasheet: 362 TFLOPS bf16 dense (733 with sparsity), 864 GB/s, 48 GB
    # (uncalibrated: Ampere's fractions).
    "l40s": GPU(362e12, 864 * GB, 48 * GB, "pcie-gen4", 31.5 * GB, *AMPERE),
    # NVIDIA Ada architecture whitepaper, RTX 4090: 165.2 TFLOPS bf16 (FP32 accumulate), 1,008 GB/s, 24 GB
    # (uncalibrated: Ampere's fractions).
    "rtx-4090": GPU(165.2e12, 1008 * GB, 24 * GB, "pcie-gen4", 31.5 * GB, *AMPERE),
    # AMD Instinct MI300X datasheet: 1,307.4 TFLOPS bf16 dense, 5.3 TB/s, 192 GB, 7 x 64 GB/s Infinity Fabric
    # (uncalibrated: Hopper's fractions).
    "mi300x": GPU(1307.4e12, 5300 * GB, 192 * GB, "pcie-gen5", 448 * GB, *HOPPER),
    # NVIDIA HGX B200 (per GPU): 2.25 PFLOPS bf16 dense (4.5 with sparsity), 8 TB/s, 180 GB
    # (uncalibrated: Hopper's fractions).
    "b200": GPU(2250e12, 8000 * GB, 180 * GB, "pcie-gen5", 900 * GB, *HOPPER),
}

# Host links, bytes/s per direction for x16 (PCI-SIG: 8, 16, 32 GT/s with 128b/130b coding),
# and NVIDIA GH200's NVLink-C2C (900 GB/s both directions together).
LINKS: dict[str, float] = {"pcie-gen3": 15.75 * GB, "pcie-gen4": 31.5 * GB, "pcie-gen5": 63 * GB,
                           "nvlink-c2c": 450 * GB}
LINK_FRACTION = 0.8  # pinned host copies reach about this much of a link (an assumption, not fitted)
COPY_LATENCY_MS = 0.01  # one copy call's fixed cost
ALL_REDUCE_LATENCY_MS = 0.008  # one tensor-parallel all-reduce's fixed cost
STEP_OVERHEAD_MS = 0.4  # per step, off the GPU: scheduling, launches, sampling (fitted with the decode points)
# Under async scheduling the host prepares a step while the GPU runs the one before, so only the part of
# STEP_OVERHEAD_MS longer than that GPU work shows (taken as long as this step's own: runs of steps alike).


def split_name(text: str) -> tuple[str, dict]:
    """A deployment's name as its model and the rest (gpu, tensor_parallel, link)."""
    match = re.fullmatch(r"([\w.\-]+)@(?:(\d+)x)?([\w\-]+?)(?:\+([\w\-]+))?", text.strip())
    if not match:
        raise ValueError(f"a deployment reads model@gpu, e.g. llama-3.1-8b@h100-sxm or "
                         f"llama-3.1-70b@4xh100-sxm+pcie-gen4; got {text!r}")
    model, tp, gpu, link = match.groups()
    return model, dict(gpu=gpu, tensor_parallel=int(tp or 1), link=link)


# What the lab offers to price steps as (any other name can be typed): one model on several GPUs
# and links, a tensor-parallel 70B, and the engine's own model on a small GPU.
SUGGESTED = ("llama-3.1-8b@h100-sxm", "llama-3.1-8b@a100-80gb", "llama-3.1-8b@l4", "llama-3.1-8b@h100-sxm+pcie-gen3",
             "llama-3.1-8b@h100-sxm+nvlink-c2c", "llama-3.1-70b@4xh100-sxm", "qwen2.5-7b@h200",
             "mistral-7b@mi300x", "llama-3.1-8b@b200", "this@l4")


@dataclass
class StepCost:
    """One step's modeled cost: its parts in ms, and how hard it drove the GPU."""

    total_ms: float
    parts: dict[str, float]  # linear, attention, elementwise, communication, overhead
    bound: str  # "memory" or "compute": which side of the roofline the step's GPU time sits on
    flops: float
    bytes: float
    mfu: float  # model FLOPs utilisation: flops / (total_ms x peak FLOP/s)
    mbu: float  # memory bandwidth utilisation: bytes / (total_ms x peak bytes/s)
    swap_ms: float = 0.0  # host copies, part of total_ms
    graph: str = "eager"  # the CUDA graph it replays: "full", "piecewise" or "eager" (engine/cudagraph.py)
    tokens: int = 0  # the tokens it computes, rounded up (a scaled request's real tokens may be fractional)
    padded_tokens: int = 0  # the token rows its matmuls compute: the tokens, padded up to the graph's size

    def to_dict(self) -> dict:
        return dict(total_ms=self.total_ms, parts=dict(self.parts), bound=self.bound, flops=self.flops,
                    bytes=self.bytes, mfu=self.mfu, mbu=self.mbu, swap_ms=self.swap_ms, graph=self.graph,
                    tokens=self.tokens, padded_tokens=self.padded_tokens)


@dataclass(frozen=True)
class Deployment:
    """A model on a GPU (or tensor_parallel of them) with a host link: what each step is priced as."""

    model: str
    gpu: str
    dtype: str = "bfloat16"
    tensor_parallel: int = 1
    link: str | None = None  # None: the GPU's default host link
    shape: ModelShape | None = field(default=None, compare=False)  # for a model outside MODELS

    def __post_init__(self) -> None:
        if self.shape is None and self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; models: {', '.join(MODELS)}")
        if self.gpu not in GPUS:
            raise ValueError(f"unknown GPU {self.gpu!r}; GPUs: {', '.join(GPUS)}")
        if self.link is not None and self.link not in LINKS:
            raise ValueError(f"unknown link {self.link!r}; links: {', '.join(LINKS)}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}; got {self.dtype!r}")
        if not isinstance(self.tensor_parallel, int) or not 1 <= self.tensor_parallel <= 64:
            raise ValueError(f"tensor_parallel must be an integer in [1, 64]; got {self.tensor_parallel!r}")

    # ---- naming -------------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str, model_folder: str | None = None) -> Deployment:
        """"llama-3.1-8b@h100-sxm", "llama-3.1-70b@4xh100-sxm+nvlink-c2c": model@[tp x]gpu[+link].
        The model "this" is the engine's own (the config.json in model_folder)."""
        model, where = split_name(text)
        if model == "this" and model_folder is not None:
            return cls.from_hf_config(model_folder, **where)
        return cls(model=model, **where)

    @classmethod
    def from_hf_config(cls, path: str | Path, gpu: str, **kwargs) -> Deployment:
        """A deployment of any transformers model folder (its config.json), the embedded one included."""
        folder = Path(path)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config = config.get("text_config", config)
        heads = config["num_attention_heads"]
        shape = ModelShape(
            layers=config["num_hidden_layers"], hidden=config["hidden_size"], heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            intermediate=config["intermediate_size"], vocab=config["vocab_size"],
            gated=config.get("hidden_act", "silu") in ("silu", "swiglu"))
        return cls(model=folder.name, gpu=gpu, shape=shape, **kwargs)

    @property
    def name(self) -> str:
        tp = f"{self.tensor_parallel}x" if self.tensor_parallel > 1 else ""
        return f"{self.model}@{tp}{self.gpu}" + (f"+{self.link}" if self.link else "")

    # ---- sizes --------------------------------------------------------------------------------

    @property
    def model_shape(self) -> ModelShape:
        return self.shape or MODELS[self.model]

    @property
    def host_link(self) -> str:
        return self.link or self._gpu.link

    @property
    def _gpu(self) -> GPU:
        return GPUS[self.gpu]

    @property
    def _bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> float:
        """Weight bytes each GPU reads every step (its share of every matmul, lm_head included)."""
        m = self.model_shape
        return (m.layers * m.layer_params + m.lm_head_params) * self._bytes / self.tensor_parallel

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token takes on each GPU (keys and values, every layer)."""
        m = self.model_shape
        kv_heads = max(1, m.kv_heads // self.tensor_parallel)
        return 2 * m.layers * kv_heads * m.head_dim * self._bytes

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        """Tokens of KV that fit beside the weights in that share of each GPU's memory."""
        free = self._gpu.memory * gpu_memory_utilization - self.weight_bytes
        return max(0, int(free // self.kv_bytes_per_token))

    # ---- costs --------------------------------------------------------------------------------

    def step_cost(self, batch: list[tuple[float, float]], swapped_tokens: float = 0,
                  graph_sizes: tuple[int, ...] = (), query_len: int = 1, overlap_host: bool = False) -> StepCost:
        """One forward pass over batch: (new tokens, tokens already in the KV cache) per request.

        Every request in the batch is taken to sample one token (vLLM computes logits for
        the sampled positions only); swapped_tokens of KV cross the host link as well. graph_sizes:
        the batch sizes CUDA graphs were captured for (engine/cudagraph.py); the matmuls and the
        elementwise work run padded up to the graph's size. Empty: eager, unpadded. query_len: the tokens
        of a decode (1, or 1 + num_speculative_tokens with drafts), so a batch of only those is a decode batch.
        overlap_host: the host's share hides behind the GPU work of the step before (async scheduling)."""
        m, tp, nbytes = self.model_shape, self.tensor_parallel, self._bytes
        tokens, seqs = sum(n for n, _ in batch), len(batch)
        if tokens == 0 and swapped_tokens == 0:
            return StepCost(0.0, dict.fromkeys(("linear", "attention", "elementwise", "communication",
                                                "overhead"), 0.0), "memory", 0.0, 0.0, 0.0, 0.0)
        graph = dispatch(graph_sizes, math.ceil(tokens - 1e-6), all(abs(n - query_len) < 1e-6 for n, _ in batch))
        rows = max(tokens, graph.padded_tokens)  # a scaled request's real tokens may be fractional
        # The GPU computes the padding rows too; MFU counts only the model's useful FLOPs.
        linear = self._gpu.roofline_ms(2 * (m.layers * m.layer_params * rows + m.lm_head_params * seqs) / tp,
                                       self.weight_bytes)
        linear_flops = 2 * (m.layers * m.layer_params * tokens + m.lm_head_params * seqs) / tp
        heads = m.heads / tp
        attention_flops, attention_bytes, attention_ms, attention_compute = 0.0, 0.0, 0.0, 0.0
        for new, context in batch:  # each sequence reads its own KV: a roofline per sequence
            attended = new * context + new * (new + 1) / 2  # causal: token i sees the context and i before it
            flops = 4 * m.layers * heads * m.head_dim * attended
            kv = (context + new) * self.kv_bytes_per_token
            ms, compute = self._gpu.roofline_ms(flops, kv)
            attention_flops, attention_bytes, attention_ms = attention_flops + flops, attention_bytes + kv, \
                attention_ms + ms
            attention_compute += ms if compute else 0.0
        # Norms, residual adds, rotary and the gated activation: read and written once per token.
        elementwise_bytes = rows * m.layers * (10 * m.hidden + 3 * m.intermediate / tp) * nbytes
        elementwise = self._gpu.roofline_ms(0.0, elementwise_bytes)
        communication = 0.0
        if tp > 1:  # two ring all-reduces of the hidden state per layer
            size = tokens * m.hidden * nbytes * 2 * (tp - 1) / tp
            communication = 2 * m.layers * (ALL_REDUCE_LATENCY_MS + size / self._gpu.peer_bandwidth * 1e3)
        swap = self.swap_ms(swapped_tokens) if swapped_tokens else 0.0
        gpu_ms = linear[0] + attention_ms + elementwise[0]
        overhead = max(0.0, STEP_OVERHEAD_MS - gpu_ms - communication) if overlap_host else STEP_OVERHEAD_MS
        parts = {"linear": linear[0], "attention": attention_ms, "elementwise": elementwise[0],
                 "communication": communication, "overhead": overhead, "swap": swap}
        total = sum(parts.values())
        compute_ms = (linear[0] if linear[1] else 0.0) + attention_compute
        flops = linear_flops + attention_flops
        moved = self.weight_bytes + attention_bytes + elementwise_bytes
        return StepCost(total, parts, "compute" if compute_ms > gpu_ms / 2 else "memory", flops, moved,
                        flops / (total * 1e-3 * self._gpu.flops), moved / (total * 1e-3 * self._gpu.bandwidth),
                        swap, graph.mode, graph.num_tokens, graph.padded_tokens)

    def swap_ms(self, num_tokens: int) -> float:
        """One host <-> device copy of that many tokens' KV over the link."""
        link = LINKS[self.host_link]
        return COPY_LATENCY_MS + num_tokens * self.kv_bytes_per_token / (link * LINK_FRACTION) * 1e3
