#!/usr/bin/env bash
# Install (CPU) and run the test suite; tests marked `slow` run in benchmarks, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# Style and layers first: each takes seconds and names what is wrong.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python scripts/lint_imports.py
.venv/bin/python -m pytest -m "not slow" -q "$@"
