"""Aggregate per-question results into the numbers of a paper-style table."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List


def _mean(values: List[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def context_tokens_by_turn(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per turn index: how many episodes reached it and their context length (mean, max) in tokens."""
    by_turn: Dict[int, List[int]] = {}
    for r in records:
        for turn, n in enumerate(r["context_tokens"]):
            by_turn.setdefault(turn, []).append(n)
    return [
        {"turn": t, "episodes": len(v), "mean": round(_mean(v), 2), "max": max(v)} for t, v in sorted(by_turn.items())
    ]


def summarize(records: List[Dict[str, Any]], method: str, data: str) -> Dict[str, Any]:
    answered = [r for r in records if r["answer"]]
    return {
        "method": method,
        "data": data,
        "questions": len(records),
        "em": round(100 * _mean([r["em"] for r in records]), 2),  # percent, as papers report
        "f1": round(100 * _mean([r["f1"] for r in records]), 2),
        "acc": round(100 * _mean([r["acc"] for r in records]), 2),
        "reward": round(_mean([r["reward"] for r in records]), 4),
        "mean_turns": round(_mean([r["num_turns"] for r in records]), 3),
        "mean_tool_calls": round(_mean([r["tool_calls"] for r in records]), 3),
        # where answers come from (percent): questions searched at all, searches that returned a
        # golden answer, and answered questions whose answer occurs in what was retrieved
        "search_rate": round(100 * _mean([float(r["tool_calls"] > 0) for r in records]), 2),
        "golden_in_search_rate": round(100 * _mean([float(r["golden_in_search"]) for r in records]), 2),
        "answer_copied_rate": round(100 * _mean([float(r["answer_in_search"]) for r in answered]), 2),
        "context_tokens_by_turn": context_tokens_by_turn(records),
        "end_reasons": dict(Counter(r["end_reason"] for r in records)),
    }
