"""The engine's size limits, each defined once: every reader of a file, a link or a flag checks these.

The lab's shared-server budgets (lab/budgets.py) are tighter still; these hold anywhere.
"""

from __future__ import annotations

# The longest run in steps, and so the latest arrival step and the furthest step a link names:
# later arrivals would only add idle steps.
MAX_STEPS = 100_000
# A lab run is stepped and drawn one request at a time; past this many, nobody can follow it.
MAX_REQUESTS = 500
MAX_ARRIVAL_MS = 86_400_000  # a day on the modeled clock
MAX_PROMPT_TOKENS = 100_000  # a synthetic prompt's length, and a generated one's
MAX_OUTPUT_TOKENS = 100_000  # a request's max_tokens: past any model's context this engine serves
# The prompt tokens a generated workload may total, checked before a word of it is drawn
# (500 requests of 100,000 tokens would take minutes and gigabytes to build, all refused).
MAX_GENERATED_TOKENS = 1_000_000
