"""The system benchmarks (`python -m benchmarks <name>`): async vs sync, memory vs ReAct, staleness,
scale, soak, evaluation beside training, seeds, the paper's comparison, and the report."""
