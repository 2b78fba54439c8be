"""Micro-batches by a token budget, and balanced splits over ranks and mini-batches.

A micro-batch is padded to its longest row, so its cost is rows x longest row;
first-fit-decreasing keeps rows of similar length together and the padding small.
All ranks must run the same number of forward/backward passes per optimiser step
(ZeRO reduces gradients inside backward), so the count is agreed first and the
rows are then spread over exactly that many micro-batches.
"""

from __future__ import annotations

import heapq
from typing import List, Sequence


def pack_by_tokens(lengths: Sequence[int], budget: int) -> List[List[int]]:
    """Indices grouped so that each group's rows x max length stays within `budget`.

    A row longer than the budget gets a micro-batch of its own (it cannot be split).
    """
    if budget <= 0:
        raise ValueError(f"micro_batch_tokens must be positive, got {budget}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: List[List[int]] = []
    for i in order:
        for b in bins:
            # Sorted decreasing: the first row of a bin is its longest.
            if (len(b) + 1) * lengths[b[0]] <= budget:
                b.append(i)
                break
        else:
            bins.append([i])
    return [sorted(b) for b in bins]


def split_balanced(lengths: Sequence[int], k: int) -> List[List[int]]:
    """Exactly `k` groups of indices with nearly equal token sums (largest first, lightest bin).

    Some groups are empty when there are fewer rows than `k`.
    """
    if k <= 0:
        raise ValueError(f"cannot split into {k} parts")
    heap = [(0, j) for j in range(k)]
    bins: List[List[int]] = [[] for _ in range(k)]
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        load, j = heapq.heappop(heap)
        bins[j].append(i)
        heapq.heappush(heap, (load + lengths[i], j))
    return [sorted(b) for b in bins]


def split_contiguous(n: int, k: int) -> List[range]:
    """`k` consecutive ranges covering 0..n-1 with sizes differing by at most one (mini-batches)."""
    if k <= 0:
        raise ValueError(f"cannot split into {k} parts")
    q, r = divmod(n, k)
    out, start = [], 0
    for j in range(k):
        size = q + (1 if j < r else 0)
        out.append(range(start, start + size))
        start += size
    return out
