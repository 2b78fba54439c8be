"""The benchmarks of a checkout: per-component scripts (`benchmarks/bench_*.py`, `gpu_check.py`)
and the system benchmarks (`python -m benchmarks <name>`, code in `benchmarks/harness/`).

Not part of the installed package: everything here imports `areal_mem` and runs from the
repository root of a checkout (the recipes in configs/ are the checkout's too).
"""
