#!/usr/bin/env bash
# The prepared acceptance run for one GPU (benchmarks/gpu_check.py): learner MFU of the Qwen2.5
# 0.5B/1.5B/3B shapes, generator tokens/s at 1/32/128 requests, a 3B disk push, and 20 steps of
# configs/debug_gpu.yaml; tables printed, JSON in --out (default docs/reports/gpu_check).
#   bash scripts/gpu_check.sh               on a CUDA machine
#   bash scripts/gpu_check.sh --smoke ...   on CPU: every path at tiny sizes (tests/bench/test_gpu_check.py, marked slow)
# With a .venv (scripts/setup.sh) it runs there. Without one (a device machine that has torch,
# transformers, aiohttp, pyarrow and tensorboard), wheels carried in .whl/ (deepspeed, omegaconf,
# bm25s, asyncio-throttle, ...) are installed without the index, and the checkout goes on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
  if compgen -G ".whl/*.whl" > /dev/null; then "$PY" -m pip install --quiet --no-index --no-deps .whl/*.whl; fi
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$PY" benchmarks/gpu_check.py "$@"
