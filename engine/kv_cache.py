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

The torch path below copies each sequence's pages out of the pool (gather) and
runs SDPA over them. Where the operator asks for it (LAB_ATTENTION=kernel), a
compiled kernel reads the same slots in place instead (engine/kernels/); the torch
path is the reference it is tested against.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import ModuleType

import torch
import torch.nn.functional as F

ATTN_IMPLEMENTATION = "scheduler_lab_paged"


def pool_bytes(loaded, config) -> int:
    """Bytes of the GPU and CPU pools KVCache allocates for this model and config: keys and values
    of every layer, for every slot of every page."""
    slots = (config.num_gpu_blocks + config.num_cpu_blocks) * config.block_size
    element = torch.empty((), dtype=loaded.model.dtype).element_size()  # the pools take the weights' dtype
    return loaded.num_layers * 2 * slots * loaded.num_kv_heads * loaded.head_dim * element


def free_memory(device: torch.device) -> int:
    """Bytes the device could still give: free CUDA memory, or the host's available physical pages."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_pool_fits(size: int, device: torch.device, config) -> None:
    """Refuse, by the knobs that size it, a pool this machine cannot hold: the allocation would
    otherwise fail deep in torch, or push the machine into swap."""
    free = free_memory(device)
    if size > free:
        raise ValueError(f"num_gpu_blocks={config.num_gpu_blocks} and num_cpu_blocks={config.num_cpu_blocks} pages "
                         f"of {config.block_size} tokens would take {size / 1e9:,.1f} GB of KV pools; this machine "
                         f"has {free / 1e9:,.1f} GB free ({device.type})")


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, block_size: int,
                 num_gpu_blocks: int, num_cpu_blocks: int, dtype: torch.dtype, device: torch.device):
        self.block_size = block_size
        shape = (num_layers, 2, num_gpu_blocks * block_size, num_kv_heads, head_dim)
        self.gpu = torch.zeros(shape, dtype=dtype, device=device)
        cpu_shape = (num_layers, 2, num_cpu_blocks * block_size, num_kv_heads, head_dim)
        self.cpu = torch.zeros(cpu_shape, dtype=dtype, device="cpu", pin_memory=device.type == "cuda")
        self._gathered = torch.empty(0, dtype=dtype, device=device)

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.gpu[index, 0], self.gpu[index, 1]

    def gather(self, index: int, pages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer index's keys and values in pages [N, P], as two [N, P * block_size, kv_heads, head_dim]
        tensors: each sequence's pages laid end to end, so position p is row p.

        They are copied into one buffer reused by every layer and step: a fresh tensor of
        megabytes per layer would be paged in by the OS on each call, which on a CPU costs
        more than the copy itself. The result is valid until the next gather.
        """
        kv = self.gpu[index]  # [2, slots, kv_heads, head_dim]: every key page, then every value page
        num_pages = kv.shape[1] // self.block_size
        size = 2 * pages.numel() * self.block_size * kv[0, 0].numel()
        if self._gathered.numel() < size:
            self._gathered = torch.empty(size, dtype=kv.dtype, device=kv.device)
        out = self._gathered[:size].view(2 * pages.numel(), -1)
        # Whole pages are copied (a page's slots are adjacent in the pool), keys and values in one
        # index_select along the first dimension, the one torch splits across CPU threads.
        flat = pages.flatten()
        torch.index_select(kv.view(2 * num_pages, -1), 0, torch.cat((flat, flat + num_pages)), out=out)
        return out.view(2, pages.shape[0], -1, *kv.shape[2:]).unbind(0)

    def _slots(self, block_ids: list[int]) -> torch.Tensor:
        ids = torch.tensor(block_ids, dtype=torch.long)
        return (ids[:, None] * self.block_size + torch.arange(self.block_size)).flatten()

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """Copy (gpu block, cpu block) pages to host memory."""
        if pairs:
            gpu, cpu = zip(*pairs, strict=True)
            src = self._slots(list(gpu)).to(self.gpu.device)
            self.cpu[:, :, self._slots(list(cpu))] = self.gpu[:, :, src].to("cpu")

    def copy_from(self, source: KVCache, pages: list[tuple[int, int]]) -> None:
        """Copy (source page, page here) pairs out of another replica's pool: a disaggregated request's
        prompt KV, computed on a prefill replica, moved into the pages its decode replica took for it."""
        if pages:
            src, dst = zip(*pages, strict=True)
            here = self._slots(list(dst)).to(self.gpu.device)
            self.gpu[:, :, here] = source.gpu[:, :, source._slots(list(src)).to(source.gpu.device)].to(self.gpu.device)

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
    does not pad every decode in the batch to its length; see attention_groups.
    """

    token_index: torch.Tensor  # [N, Q] where each query sits in the packed batch (padding: 0)
    rows: torch.Tensor  # [M] the packed-batch row of each real (not padding) query ...
    picks: torch.Tensor  # [M] ... and its index in the group's flattened [N * Q] queries
    query_pos: torch.Tensor  # [N, Q] position of each query in its sequence
    pages: torch.Tensor  # [N, P] block table, enough pages for the longest context (padding: page 0)
    mask: torch.Tensor  # [N, 1, Q, P * block_size] causal and length mask


@dataclass
class KernelRows:
    """What the compiled kernel (engine/kernels/) reads per query row instead of groups and masks."""

    module: ModuleType
    tables: torch.Tensor  # [S, P] each sequence's block table (padding: page 0, never read)
    seq_of_row: torch.Tensor  # [T] the sequence each packed token belongs to
    lengths: torch.Tensor  # [T] how many positions each token attends to: its own and every one before it


@dataclass
class PagedContext:
    cache: KVCache
    positions: torch.Tensor  # [T] each packed token's position in its sequence (the model's position ids)
    slot_mapping: torch.Tensor  # [T] where each packed token's key and value are written
    groups: list[AttentionGroup]  # the torch path's; empty when the kernel attends
    kernel: KernelRows | None = None


def attention_groups(seqs: list[tuple[int, int, list[int]]]) -> list[list[int]]:
    """Split the batch (indices into seqs) into groups that are padded and attended together.

    A group pads every sequence to its longest query and its longest context, and
    attention costs what the padded group reads and computes. So decodes (one query
    each) and prefills are grouped apart, and each kind is sorted by context length
    and cut wherever the context more than doubles: padding then never costs more
    than the real work of its group.
    """
    groups: list[list[int]] = []
    for decode in (True, False):
        shortest = 0  # context length of the current group's first (shortest) sequence
        for i in sorted((i for i, s in enumerate(seqs) if (s[1] == 1) == decode), key=lambda i: sum(seqs[i][:2])):
            length = seqs[i][0] + seqs[i][1]
            if shortest and length <= 2 * shortest:
                groups[-1].append(i)
            else:
                groups.append([i])
                shortest = length
    return groups


def build_context(cache: KVCache, seqs: list[tuple[int, int, list[int]]], device: torch.device,
                  kernel: ModuleType | None = None) -> PagedContext:
    """seqs: (first position, number of new tokens, block table) per sequence, in batch order. With a
    kernel, the rows it reads; without, the groups the torch path pads and masks."""
    bs = cache.block_size
    counts = torch.tensor([n for _, n, _ in seqs])
    seq_of_row = torch.repeat_interleave(torch.arange(len(seqs)), counts)
    first_row = torch.cumsum(counts, 0) - counts
    positions = torch.tensor([start for start, _, _ in seqs])[seq_of_row] + torch.arange(len(seq_of_row)) \
        - first_row[seq_of_row]
    width = max(len(table) for _, _, table in seqs)
    tables = torch.tensor([table + [0] * (width - len(table)) for _, _, table in seqs])
    # A token at position p lives in slot block_table[p // block_size] * block_size + p % block_size.
    slot_mapping = (tables[seq_of_row, positions // bs] * bs + positions % bs).to(device)
    if kernel is not None:
        rows = KernelRows(kernel, tables.to(device), seq_of_row.to(device), (positions + 1).to(device))
        return PagedContext(cache, positions.to(device), slot_mapping, [], rows)
    groups = []
    for members in attention_groups(seqs):
        start = torch.tensor([seqs[i][0] for i in members])
        count = torch.tensor([seqs[i][1] for i in members])
        offset = first_row[members]
        num_pages = math.ceil(int((start + count).max()) / bs)  # enough for the longest context
        pages = tables[members, :num_pages]
        key_pos = torch.arange(num_pages * bs)
        q = torch.arange(int(count.max()))
        valid = q[None, :] < count[:, None]
        query_pos = torch.where(valid, start[:, None] + q, 0)
        token_index = torch.where(valid, offset[:, None] + q, 0)
        # Causal: a query sees its own position and earlier ones. That also hides the padded
        # tail of shorter contexts, and padding queries (position 0) see one harmless slot.
        mask = key_pos[None, None, :] <= query_pos[:, :, None]
        groups.append(AttentionGroup(token_index.to(device), token_index[valid].to(device),
                                     valid.flatten().nonzero().squeeze(1).to(device), query_pos.to(device),
                                     pages.to(device), mask[:, None].to(device)))
    return PagedContext(cache, positions.to(device), slot_mapping, groups)


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
    if ctx.kernel is not None:  # the compiled kernel reads the pages in place (engine/kernels/)
        rows = ctx.kernel
        scale = scaling if scaling is not None else q.shape[-1] ** -0.5
        out = rows.module.paged_attention(q.contiguous(), k_pool, v_pool, rows.tables, rows.seq_of_row, rows.lengths,
                                          scale, ctx.cache.block_size, window or 0)
        return out.unsqueeze(0), None
    heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
    share = heads // kv_heads  # query heads per KV head (grouped-query attention)
    out = torch.empty_like(q)
    for g in ctx.groups:
        n, width = g.token_index.shape
        mask = g.mask
        if window:
            key_pos = torch.arange(mask.shape[-1], device=q.device)
            mask = mask & (key_pos > g.query_pos[:, :, None] - window)[:, None]
        keys, values = ctx.cache.gather(module.layer_idx, g.pages)
        # The query heads sharing a KV head become extra query rows of that head, so SDPA reads
        # each KV head once ([N, kv_heads, share * Q, head_dim]); enable_gqa would copy it per query head.
        queries = q[g.token_index].permute(0, 2, 1, 3).reshape(n, kv_heads, share * width, head_dim)
        if width > 1:  # each folded row needs its query's mask row; one decode row broadcasts as it is
            mask = mask.repeat(1, 1, share, 1)
        o = F.scaled_dot_product_attention(queries, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask,
                                           scale=scaling)
        o = o.view(n, heads, width, head_dim).transpose(1, 2).reshape(n * width, heads, head_dim)
        out[g.rows] = o[g.picks]
    return out.unsqueeze(0), None
