"""Aggregate per-question results into the numbers of a paper-style table.

A number whose key no record holds is None, not 0: a workflow scored without the answer
metrics (a plugin's, not question answering) has no EM, and a 0 would pass for a measured one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Sequence


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _mean_of(records: List[Dict[str, Any]], key: str, digits: int, scale: float = 1.0) -> Optional[float]:
    """`scale` times the mean of `key` over the records that have it, rounded; None when none has it."""
    having = [float(r[key]) for r in records if key in r]
    return round(scale * _mean(having), digits) if having else None


def context_tokens_by_turn(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per turn index: how many episodes reached it and their context length (mean, max) in tokens."""
    by_turn: Dict[int, List[int]] = {}
    for r in records:
        for turn, n in enumerate(r["context_tokens"]):
            by_turn.setdefault(turn, []).append(n)
    return [
        {"turn": t, "episodes": len(v), "mean": round(_mean(v), 2), "max": max(v)} for t, v in sorted(by_turn.items())
    ]


def by_type(records: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """EM, F1 (percent), searches, prefill and decode tokens per question for each question type (`type`: the world's
    single | bridge | comparison, or a dataset's own); empty when the records have none. Where
    the answer was lost: `golden_in_search_rate` (a search returned a golden answer) and, for
    questions with a bridge entity, `first_hop_in_search_rate` (a search returned the passage
    that links to it) and `mean_hops_found` (how far along the chain the searches got)."""
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for r in records:
        if r.get("type"):
            groups.setdefault(r["type"], []).append(r)
    return {
        t: {
            "questions": len(rs),
            "em": _mean_of(rs, "em", 2, scale=100),
            "f1": _mean_of(rs, "f1", 2, scale=100),
            "mean_tool_calls": _mean_of(rs, "tool_calls", 3),
            "mean_prefill_tokens": _mean_present(rs, "prefill_tokens"),
            "mean_decode_tokens": _mean_present(rs, "decode_tokens"),
            **_rate(rs, "golden_in_search"),
            **_rate(rs, "first_hop_in_search"),
            **_mean_hops(rs),
        }
        for t, rs in sorted(groups.items())
    }


def _mean_present(records: List[Dict[str, Any]], key: str) -> Optional[float]:
    """The mean of `key` over the records that have it; None when none has it (results written
    before it was recorded): a 0 would pass for a measured cost, and win a comparison."""
    having = [r[key] for r in records if key in r]
    return round(_mean(having), 1) if having else None


def _mean_hops(records: List[Dict[str, Any]]) -> Dict[str, float]:
    """`mean_hops_found` over the records that have `hops_found` (bridge questions); nothing when none has it."""
    hops = _mean_of(records, "hops_found", 2)
    return {} if hops is None else {"mean_hops_found": hops}


def _rate(records: List[Dict[str, Any]], key: str) -> Dict[str, float]:
    """`{key}_rate` in percent over the records that have `key`; nothing when none has it."""
    having = [float(r[key]) for r in records if key in r]
    return {f"{key}_rate": round(100 * _mean(having), 2)} if having else {}


def summarize(records: List[Dict[str, Any]], method: str, data: str) -> Dict[str, Any]:
    answered = [r for r in records if r.get("answer")]
    calls = [r["tool_calls"] for r in records if "tool_calls" in r]
    return {
        "method": method,
        "data": data,
        "questions": len(records),
        "em": _mean_of(records, "em", 2, scale=100),  # percent, as papers report
        "f1": _mean_of(records, "f1", 2, scale=100),
        "acc": _mean_of(records, "acc", 2, scale=100),
        "reward": round(_mean([r["reward"] for r in records]), 4),
        "mean_turns": _mean_of(records, "num_turns", 3),
        "mean_tool_calls": _mean_of(records, "tool_calls", 3),
        # where answers come from (percent): questions searched at all, searches that returned a
        # golden answer, and answered questions whose answer occurs in what was retrieved
        "search_rate": round(100 * _mean([float(n > 0) for n in calls]), 2) if calls else None,
        "golden_in_search_rate": round(100 * _mean([float(r["golden_in_search"]) for r in records]), 2),
        "answer_copied_rate": round(100 * _mean([float(r["answer_in_search"]) for r in answered]), 2),
        # prompt tokens of every generation request, summed per episode: a generator's prefill
        # without a prefix cache (ReAct's grows with every turn, MemSearcher's does not)
        "mean_prefill_tokens": _mean_present(records, "prefill_tokens"),
        # tokens the model generated per episode (memory rewrites included): the decode cost
        "mean_decode_tokens": _mean_present(records, "decode_tokens"),
        "peak_context_tokens": max((max(r["context_tokens"], default=0) for r in records), default=0),
        "context_tokens_by_turn": context_tokens_by_turn(records),
        "by_type": by_type(records),
        "end_reasons": dict(Counter(r["end_reason"] for r in records if "end_reason" in r)),
    }
