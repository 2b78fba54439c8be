#!/usr/bin/env bash
# Install (CPU) and run the single-node debug recipe, configs/debug_cpu.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
RUN_DIR=${RUN_DIR:-runs/debug}
.venv/bin/areal-mem world --out "$RUN_DIR/world"
.venv/bin/areal-mem init-model --world "$RUN_DIR/world" --out "$RUN_DIR/model"
