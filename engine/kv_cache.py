"""The paged KV pool and the attention that reads it through block tables.

Every layer's keys and values live in one tensor of ``num_blocks * block_size``
slots. A token at position p of a request lives in slot
``block_table[p // block_size] * block_size + p % block_size``: the block table is
the only thing that ties a request to its memory, which is why pages can sit
anywhere in the pool.

``paged_attention`` is registered with transformers' ``AttentionInterface``, so
the model's own projections, RoPE and MLPs run unchanged while attention writes
this step's keys and values into their slots and reads each request's whole
context back through its block table. The per-step context travels as a keyword
argument of the forward call, never as a global, so engines in several threads
can share one model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

ATTN_IMPLEMENTATION = "scheduler_lab_paged"


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, block_size: int,
                 num_gpu_blocks: int, num_cpu_blocks: int, dtype: torch.dtype, device: torch.device):
        self.block_size = block_size
        shape = (num_layers, 2, num_gpu_blocks * block_size, num_kv_heads, head_dim)
        self.gpu = torch.zeros(shape, dtype=dtype, device=device)
        cpu_shape = (num_layers, 2, num_cpu_blocks * block_size, num_kv_heads, head_dim)
        self.cpu = torch.zeros(cpu_shape, dtype=dtype, device="cpu", pin_memory=device.type == "cuda")

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.gpu[index, 0], self.gpu[index, 1]

    def _slots(self, block_ids: list[int]) -> torch.Tensor:
        ids = torch.tensor(block_ids, dtype=torch.long)
        return (ids[:, None] * self.block_size + torch.arange(self.block_size)).flatten()

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """Copy (gpu block, cpu block) pages to host memory."""
        if pairs:
            gpu, cpu = zip(*pairs, strict=True)
            src = self._slots(list(gpu)).to(self.gpu.device)
            self.cpu[:, :, self._slots(list(cpu))] = self.gpu[:, :, src].to("cpu")

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """Copy (cpu block, gpu block) pages back into the device pool."""
        if pairs:
            cpu, gpu = zip(*pairs, strict=True)
            dst = self._slots(list(gpu)).to(self.gpu.device)
            self.gpu[:, :, dst] = self.cpu[:, :, self._slots(list(cpu))].to(self.gpu.device)


@dataclass
class AttentionGroup:
    """Sequences attended together, padded to the longest query and context in the group.

    Decodes (one query each) and prefills are grouped apart, so one long prompt
    does not pad every decode in the batch to its length.
    """

    token_index: torch.Tensor  # [N, Q] where each query sits in the packed batch (padding: 0)
    query_valid: torch.Tensor  # [N, Q] which of those are real
    query_pos: torch.Tensor  # [N, Q] position of each query in its sequence
    kv_slots: torch.Tensor  # [N, L] pool slot of each context position (padding: slot 0)
    mask: torch.Tensor  # [N, 1, Q, L] causal and length mask


@dataclass
class PagedContext:
    cache: KVCache
    slot_mapping: torch.Tensor  # [T] where each packed token's key and value are written
    groups: list[AttentionGroup]


def build_context(cache: KVCache, seqs: list[tuple[int, int, list[int]]], device: torch.device) -> PagedContext:
    """seqs: (first position, number of new tokens, block table) per sequence, in batch order."""
    bs = cache.block_size
    offsets, total = [], 0
    for _, n, _ in seqs:
        offsets.append(total)
        total += n
    slot_mapping = torch.empty(total, dtype=torch.long)
    groups = []
    for members in ([i for i, s in enumerate(seqs) if s[1] == 1], [i for i, s in enumerate(seqs) if s[1] > 1]):
        if not members:
            continue
        start = torch.tensor([seqs[i][0] for i in members])
        count = torch.tensor([seqs[i][1] for i in members])
        offset = torch.tensor([offsets[i] for i in members])
        width = max(len(seqs[i][2]) for i in members)
        tables = torch.tensor([seqs[i][2] + [0] * (width - len(seqs[i][2])) for i in members])
        ctx_len = start + count
        key_pos = torch.arange(int(ctx_len.max()))
        kv_slots = tables[:, key_pos // bs] * bs + key_pos % bs
        q = torch.arange(int(count.max()))
        valid = q[None, :] < count[:, None]
        query_pos = torch.where(valid, start[:, None] + q, 0)
        token_index = torch.where(valid, offset[:, None] + q, 0)
        slot_mapping[token_index[valid]] = kv_slots.gather(1, query_pos)[valid]
        # Causal: a query sees its own position and earlier ones. That also hides the padded
        # tail of shorter contexts, and padding queries (position 0) see one harmless slot.
        mask = key_pos[None, None, :] <= query_pos[:, :, None]
        groups.append(AttentionGroup(token_index.to(device), valid.to(device), query_pos.to(device),
                                     kv_slots.to(device), mask[:, None].to(device)))
    return PagedContext(cache, slot_mapping.to(device), groups)


def paged_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """Write this step's K/V into the pool, then attend over each sequence's pages.

    query is [1, heads, T, head_dim] and key/value [1, kv_heads, T, head_dim] for the
    packed batch of T tokens; the output is [1, T, heads, head_dim] as transformers expects.
    """
    ctx: PagedContext | None = kwargs.get("paged_context")
    if ctx is None:
        raise RuntimeError(f"attention '{ATTN_IMPLEMENTATION}' runs only inside the scheduler-lab engine")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, heads, head_dim]
    k_pool, v_pool = ctx.cache.layer(module.layer_idx)
    k_pool[ctx.slot_mapping] = k
    v_pool[ctx.slot_mapping] = v
    window = kwargs.get("sliding_window")
    out = torch.empty_like(q)
    for g in ctx.groups:
        mask = g.mask
        if window:
            key_pos = torch.arange(g.kv_slots.shape[1], device=q.device)
            mask = mask & (key_pos > g.query_pos[:, :, None] - window)[:, None]
        o = F.scaled_dot_product_attention(
            q[g.token_index].transpose(1, 2), k_pool[g.kv_slots].transpose(1, 2),
            v_pool[g.kv_slots].transpose(1, 2), attn_mask=mask, scale=scaling,
            enable_gqa=q.shape[1] != k.shape[1])
        out[g.token_index[g.query_valid]] = o.transpose(1, 2)[g.query_valid]
    return out.unsqueeze(0), None
