#!/usr/bin/env bash
# Install (CPU) and run the test suite; tests marked `slow` run in benchmarks, not here.
#   scripts/test.sh [pytest args...]   the args go to both pytest tiers
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# Style, types and layers first: each takes seconds and names what is wrong.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python scripts/typecheck.py
.venv/bin/python scripts/lint_imports.py

# The suite in two tiers, each test in exactly one (tests/conftest.py marks `integration`):
# the unit tests first, so that a broken unit fails in about two minutes, then the tests that
# start services and processes. Exit status 5 (the tier selected no test of the given args) passes.
tier() {
  local rc=0
  .venv/bin/python -m pytest -m "$1" -q "${@:2}" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
}
tier "not integration and not slow" "$@"
tier "integration and not slow" "$@"
