"""`areal-mem bench`: system benchmarks (async vs sync, memory vs ReAct, staleness, scale) and the report."""
