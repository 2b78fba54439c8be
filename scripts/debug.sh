#!/usr/bin/env bash
# Install (CPU) and run the single-node debug recipe, configs/debug_cpu.yaml: world, tiny model,
# index, SFT warm start on oracle demonstrations, asynchronous GRPO, evaluation on the test split.
# Extra arguments are config overrides, e.g. `bash scripts/debug.sh seed=1 run_dir=runs/debug1`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/areal-mem train --config configs/debug_cpu.yaml "$@"
