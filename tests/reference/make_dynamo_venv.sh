#!/usr/bin/env bash
# Make (or reuse) the venv that holds NVIDIA Dynamo's runtime (its KV router and mock engines), for
# the routing reference. Dynamo stays out of the lab's dependencies: it is only the oracle, run in
# its own process (tests/reference/dynamo_replay.py) that needs nothing of the lab.
set -euo pipefail
venv="${DYNAMO_REFERENCE_VENV:-$HOME/.cache/scheduler-loop-lab/dynamo-venv}"
if ! "$venv/bin/python" -c "from dynamo._core import run_mocker_trace_replay" >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q ai-dynamo-runtime==1.6.1
fi
echo "$venv"
