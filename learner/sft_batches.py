"""The rows of each SFT step: a fixed row count, or a padded-token budget over length-sorted rows.

A step's micro-batch is padded to its longest row. MemSearcher's contexts are bimodal (a first
turn of ~190 tokens, a memory turn of ~470 in the debug recipe), so 8 rows drawn at random pad to
1.43x their real tokens, and attention, quadratic in the padded length, does more than that of
useless work. Sorting an epoch's rows by length and cutting them at a token budget, as fairseq's
`max_tokens` batches do, pads ~1% and gives every step about the same number of real tokens;
the batches are then shuffled, so the order in which lengths come stays random.

Both plans depend only on the row lengths, the seed and the epoch: a resumed run rebuilds them
and skips the rows it has consumed.
"""

from __future__ import annotations

import random
from typing import List, Sequence


def epoch_order(n: int, seed: int, epoch: int) -> List[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def row_batches(n: int, batch_rows: int, seed: int, epoch: int) -> List[List[int]]:
    """Consecutive slices of `batch_rows` rows of the epoch's shuffled order (the last may be short)."""
    order = epoch_order(n, seed, epoch)
    return [order[k : k + batch_rows] for k in range(0, n, batch_rows)]


def token_batches(lengths: Sequence[int], budget: int, seed: int, epoch: int) -> List[List[int]]:
    """Batches of rows of similar length whose rows x longest row stays within `budget`, shuffled.

    Rows of equal length keep the epoch's shuffled order (a stable sort), so which rows share a
    batch changes from epoch to epoch. A row longer than the budget is a batch of its own.
    """
    if budget <= 0:
        raise ValueError(f"learner.sft.batch_tokens must be positive, got {budget}")
    order = sorted(epoch_order(len(lengths), seed, epoch), key=lambda i: lengths[i])
    batches: List[List[int]] = []
    for i in order:
        # ascending lengths: the row added is the batch's longest
        if batches and (len(batches[-1]) + 1) * lengths[i] <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    random.Random(seed * 1_000_003 + epoch).shuffle(batches)
    return batches


def padded_tokens(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> int:
    """What the batches cost: each row padded to its batch's longest."""
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)
