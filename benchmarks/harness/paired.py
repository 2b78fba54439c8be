"""Paired comparisons of two evaluations over the same questions: what changed, and a sign test.

Two greedy evaluations of the same question list (before and after RL, or two workflows) are
compared question by question; ties carry no information about which is better, so the test
is the exact two-sided binomial test on the questions that changed (the sign test).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from areal_mem.jsonl import iter_jsonl


def read_typed(path: str) -> Dict[str, Tuple[Optional[str], float]]:
    """`results.jsonl` of `areal-mem eval` -> {question id: (its `type`, EM 0 or 1)}; the type is
    the world's single | bridge | comparison, None for questions from elsewhere."""
    out: Dict[str, Tuple[Optional[str], float]] = {}
    for where, row in iter_jsonl(path):
        if not isinstance(row, dict) or "id" not in row or "em" not in row:
            raise ValueError(f"{where}: an eval result needs `id` and `em`")
        out[str(row["id"])] = (row.get("type"), float(row["em"]))
    return out


def read_results(path: str, qtype: Optional[str] = None) -> Dict[str, float]:
    """`results.jsonl` -> {question id: EM}; with `qtype`, only the questions of that type."""
    return {q: em for q, (t, em) in read_typed(path).items() if qtype is None or t == qtype}


def fixed_broken(before: Dict[str, float], after: Dict[str, float]) -> Tuple[int, int]:
    """Questions right only after (fixed) and right only before (broken); both must list the same ids."""
    if before.keys() != after.keys():
        missing = sorted(before.keys() ^ after.keys())[:5]
        raise ValueError(f"the two evaluations cover different questions (e.g. {missing})")
    fixed = sum(1 for q in before if after[q] > before[q])
    broken = sum(1 for q in before if after[q] < before[q])
    return fixed, broken


def compare_results(before: str, after: str, qtype: Optional[str] = None) -> Tuple[int, int, float]:
    """Two `results.jsonl` files over the same questions (only `qtype`'s, if given): fixed,
    broken and the sign test; ValueError when they cover different questions."""
    fixed, broken = fixed_broken(read_results(before, qtype), read_results(after, qtype))
    return fixed, broken, sign_test_p(fixed, broken)


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided sign test: the chance of a split at least this uneven if both were equally likely."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def pooled(pairs: List[Tuple[int, int]]) -> Tuple[int, int, float]:
    """Fixed and broken summed over independent runs, and the sign test of the sum."""
    fixed, broken = sum(f for f, _ in pairs), sum(b for _, b in pairs)
    return fixed, broken, sign_test_p(fixed, broken)
