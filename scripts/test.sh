#!/usr/bin/env bash
# Install (CPU) and run the test suite; tests marked `slow` run in benchmarks, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/python -m pytest -m "not slow" -q "$@"
