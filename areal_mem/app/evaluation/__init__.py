"""Evaluation: run a workflow greedily over a question file, write per-question results and a summary."""
