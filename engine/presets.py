"""The engine presets: each real engine's scheduling rules, set together by ``engine_preset``.

Every rule the engine has beyond vLLM v1 belongs to a named engine here, with the
source file it follows. Any knob given beside a preset overrides its value; what
each preset approximates is in the README ("Engine presets").
"""

from __future__ import annotations

# One row per preset: the knob values it sets.
PRESET_RULES: dict[str, dict[str, object]] = {
    # vllm/v1/core/sched/scheduler.py (vLLM 0.32): one token budget, running requests first, chunked
    # prefill on, recompute preemption, a waiting request never evicts a running one.
    "vllm_v1": dict(step_order="decode_first", enable_chunked_prefill=True, preemption_mode="recompute",
                    victim_rule="policy", watermark=0.0, preempt_on_admission=False, admission_reserve="prompt"),
    # vllm/core/scheduler.py (v0 without chunked prefill): prefill-only steps, a 1% watermark, swap
    # (v0 swapped multi-sequence groups; one-sequence requests recomputed unless preemption_mode said
    # swap), and under priority a waiting request preempts strictly lower-priority running ones (a simpler
    # form of v0's _schedule_priority_preemption, which ranks by (priority, arrival) and runs only in its
    # non-chunked path in a step that scheduled no prompt).
    "vllm_v0": dict(step_order="prefill_first", enable_chunked_prefill=False, preemption_mode="swap",
                    victim_rule="policy", watermark=0.01, preempt_on_admission=True, admission_reserve="prompt"),
    # sglang/srt/managers/scheduler.py + schedule_policy.py: prefill batches first (chunked), admission
    # charges running requests new_token_ratio x their remaining output, retraction of the fewest-generated.
    "sglang": dict(step_order="prefill_first", enable_chunked_prefill=True, preemption_mode="recompute",
                   victim_rule="fewest_generated", watermark=0.0, preempt_on_admission=False,
                   admission_reserve="output_estimate"),
    # TensorRT-LLM capacity scheduler, GUARANTEED_NO_EVICT (its default): admit only what can run to
    # max_tokens beside every running request's own max_tokens, so nothing is ever evicted.
    "trtllm_no_evict": dict(step_order="decode_first", enable_chunked_prefill=False, preemption_mode="recompute",
                            victim_rule="policy", watermark=0.0, preempt_on_admission=False,
                            admission_reserve="max_tokens"),
    # TensorRT-LLM MAX_UTILIZATION: admit on today's need and pause (evict, recompute later) the newest
    # request when the KV cache runs out.
    "trtllm_max_util": dict(step_order="decode_first", enable_chunked_prefill=False, preemption_mode="recompute",
                            victim_rule="policy", watermark=0.0, preempt_on_admission=False,
                            admission_reserve="prompt"),
}
# Where each preset's rules come from, in the engines' own sources.
PRESET_SOURCES = {
    "vllm_v1": "vLLM 0.32: vllm/v1/core/sched/scheduler.py, vllm/v1/core/kv_cache_manager.py, block_pool.py",
    "vllm_v0": "vLLM v0: vllm/core/scheduler.py, vllm/core/block_manager.py",
    "sglang": "SGLang: sglang/srt/managers/scheduler.py, schedule_policy.py (PrefillAdder), schedule_batch.py",
    "trtllm_no_evict": "TensorRT-LLM: CapacitySchedulerPolicy.GUARANTEED_NO_EVICT (batch_manager capacity scheduler)",
    "trtllm_max_util": "TensorRT-LLM: CapacitySchedulerPolicy.MAX_UTILIZATION (batch_manager capacity scheduler)",
}
