"""The KV cache's bookkeeping, one job a module; engine/block_manager.py puts them together.

    page_pool.py     the GPU pages: references, the free queue, paged and contiguous takes
    prefix_cache.py  full pages named by their tokens, found again by later requests
    swap_space.py    the CPU pages swap preemption copies into
    block_map.py     the pages as the lab draws them

The tensors themselves live in engine/kv_cache.py, indexed by these pages' ids.
"""
