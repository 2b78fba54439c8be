"""Each shared prefix of a micro-batch computed once (`learner.shared_prefix`).

In a MemSearcher group every context starts with the same system prompt and question, and the
system prompt is the same in every group: padded rows compute those tokens once per row. Here
the rows of a micro-batch become a prefix tree (`build_tree`): a node holds a run of tokens that
at least two rows start with, its children the runs that branch off after it, and its leaves the
rows whose own tokens (the suffix: every position a loss or log-prob reads) start where it ends.
`tree_hidden` runs the backbone once per node, its keys and values appended to its ancestors'
(a `DynamicCache`), and once per batch of its leaves (`leaf_batches`: leaves of similar length
together), a right-padded batch whose every row attends to the node's cache expanded along it. Autograd carries the suffixes' gradients
back through the cache tensors into the one computation of each prefix, so loss and gradients
are the padded forward's (float rounding aside; `tests/learner/test_shared_prefix.py`).

Only prompt tokens are shared (a row's shared part ends at `prompt_len - 1`), so every position
the head reads lies in a suffix. Masks are plain causal ones: a suffix batch's queries start
after the cache (transformers builds SDPA's bottom-right causal mask; FlashAttention's causal
mode aligns the same way) and its rows are right-padded, so no real token follows a pad and no
padding mask is needed, as in the unshared forward.

Micro-batches (`plan_ranks`, `pack_contiguous`): the rows are sorted by their tokens, so rows
with a common prefix are neighbours; the tokens a run of sorted rows computes is the size of its
prefix tree, `len(first) + sum(len(row) - common(row, previous))`, which is what the ranks are
balanced on and what `learner.micro_batch_tokens` bounds (suffix padding left out).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from transformers import PretrainedConfig

from .batch import TrainRow


@dataclass
class Node:
    """Tokens at positions `start..start+len(tokens)` shared by every row below this node."""

    start: int
    tokens: List[int]
    children: List[Node] = field(default_factory=list)
    leaves: List[int] = field(default_factory=list)  # rows whose suffix starts at `end`
    batches: List[List[int]] = field(default_factory=list)  # the leaves, one forward per batch

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


def _shareable(row: TrainRow) -> int:
    """Tokens of a row another row may compute for it: its prompt up to the first label position."""
    return row.prompt_len - 1


def _common(a: Sequence[int], b: Sequence[int], start: int, limit: int) -> int:
    """Length of the common run of `a` and `b` from `start`, at most up to position `limit`."""
    n = start
    while n < limit and a[n] == b[n]:
        n += 1
    return n - start


def leaf_batches(widths: Sequence[int], overhead: int) -> List[List[int]]:
    """Positions of `widths` in batches that each pad to their longest, cut so as to compute the
    fewest tokens counting `overhead` tokens for each forward (widths sorted, then the best cuts
    by dynamic programming: suffixes of a turn that answers and of one that searched differ
    several-fold, and one batch would pad the short ones to the long)."""
    order = sorted(range(len(widths)), key=lambda i: -widths[i])
    best, cut = [0] + [0] * len(order), [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        best[j], cut[j] = min((best[i] + overhead + (j - i) * widths[order[i]], i) for i in range(j))
    out, j = [], len(order)
    while j:
        out.append(sorted(order[cut[j] : j]))
        j = cut[j]
    return out[::-1]


def _split(rows: Sequence[TrainRow], idx: List[int], start: int, depth: int, min_tokens: int):
    """(nodes, leaves) for rows `idx`, which all hold the same tokens up to `depth`, of which
    `start..depth` no node computes yet. A branch too short to pay for a forward of its own
    (`end - start < min_tokens`) computes its tokens in each of its rows or deeper nodes."""
    nodes: List[Node] = []
    leaves: List[int] = []
    buckets: Dict[int, List[int]] = {}
    for i in idx:
        if _shareable(rows[i]) > depth:
            buckets.setdefault(rows[i].input_ids[depth], []).append(i)
        else:
            leaves.append(i)
    for bucket in buckets.values():
        if len(bucket) == 1:
            leaves.extend(bucket)
            continue
        first = rows[bucket[0]].input_ids
        limit = min(_shareable(rows[i]) for i in bucket)
        end = depth + min(_common(first, rows[i].input_ids, depth, limit) for i in bucket[1:])
        if end - start >= min_tokens:
            node = Node(start, list(first[start:end]))
            node.children, node.leaves = _split(rows, bucket, end, end, min_tokens)
            _batch_leaves(rows, node, min_tokens)
            nodes.append(node)
        else:
            deeper, own = _split(rows, bucket, start, end, min_tokens)
            nodes.extend(deeper)
            leaves.extend(own)
    return nodes, sorted(leaves)


def build_tree(rows: Sequence[TrainRow], min_tokens: int) -> Node:
    """The prefix tree of a micro-batch's rows; the root holds no tokens."""
    root = Node(0, [])
    root.children, root.leaves = _split(rows, list(range(len(rows))), 0, 0, max(1, min_tokens))
    _batch_leaves(rows, root, max(1, min_tokens))
    return root


def _batch_leaves(rows: Sequence[TrainRow], node: Node, overhead: int) -> None:
    batches = leaf_batches([len(rows[i]) - node.end for i in node.leaves], overhead)
    node.batches = [[node.leaves[k] for k in b] for b in batches]


def tree_tokens(rows: Sequence[TrainRow], tree: Node, padded: bool = True) -> int:
    """Tokens the backbone computes for `tree`: every node's, plus each leaf batch's suffixes
    (`padded`: each padded to its batch's longest, as computed; else their own lengths)."""
    total = len(tree.tokens)
    for b in tree.batches:
        suffix = [len(rows[i]) - tree.end for i in b]
        total += len(suffix) * max(suffix) if padded else sum(suffix)
    return total + sum(tree_tokens(rows, c, padded) for c in tree.children)


# ---- micro-batches ----


def sorted_costs(rows: Sequence[TrainRow]) -> Tuple[List[int], List[int]]:
    """(the rows' indices sorted by their tokens, the tokens each adds to the tree of the sorted
    rows before it: its length less what it shares with its predecessor)."""
    order = sorted(range(len(rows)), key=lambda i: (rows[i].input_ids, i))
    costs = []
    for k, i in enumerate(order):
        if k == 0:
            costs.append(len(rows[i]))
            continue
        p = rows[order[k - 1]]
        limit = min(_shareable(p), _shareable(rows[i]))
        costs.append(len(rows[i]) - _common(p.input_ids, rows[i].input_ids, 0, limit))
    return order, costs


def cut_balanced(costs: Sequence[int], k: int) -> List[range]:
    """`k` consecutive ranges of positions with nearly equal cost sums (some empty with few rows).

    A range's first row starts a new tree and costs its whole length: the costs given are those
    of sorted neighbours, so the ranges are balanced on what they share within themselves."""
    total = sum(costs)
    out, start, acc = [], 0, 0
    for j in range(k):
        target = total * (j + 1) / k
        end = start
        while end < len(costs) and (j == k - 1 or acc + costs[end] / 2 <= target):
            acc += costs[end]
            end += 1
        out.append(range(start, end))
        start = end
    return out


def pack_contiguous(rows: Sequence[TrainRow], positions: Sequence[int], budget: int) -> List[List[int]]:
    """Consecutive runs of the sorted `positions` (indices into `rows`) whose prefix tree holds at
    most `budget` tokens (a row longer than the budget gets a micro-batch of its own)."""
    if budget <= 0:
        raise ValueError(f"micro_batch_tokens must be positive, got {budget}")
    out: List[List[int]] = []
    size = 0
    prev: Optional[TrainRow] = None
    for i in positions:
        r = rows[i]
        add = len(r)
        if prev is not None:
            add -= _common(prev.input_ids, r.input_ids, 0, min(_shareable(prev), _shareable(r)))
        if out and size + add <= budget:
            out[-1].append(i)
            size += add
        else:
            out.append([i])
            size = len(r)
        prev = r
    return out


def plan_rank(rows: Sequence[TrainRow], world: int, rank: int, budget: int) -> List[List[TrainRow]]:
    """This rank's micro-batches of one mini-batch: rows sorted by tokens, cut into `world`
    consecutive shares of about equal tree size, this rank's share cut by `budget`."""
    order, costs = sorted_costs(rows)
    share = cut_balanced(costs, world)[rank]
    return [[rows[i] for i in mb] for mb in pack_contiguous(rows, [order[k] for k in share], budget)]


# ---- the forward ----


def _fork(cache, batch: int):
    """A new cache holding `cache`'s keys and values expanded to `batch` rows (a view each;
    the suffix forward's concatenation materialises them, and autograd sums the rows' gradients
    back into the one prefix)."""
    from transformers import DynamicCache

    if cache is None:
        return None
    return DynamicCache(
        ddp_cache_data=[
            (lay.keys.expand(batch, -1, -1, -1), lay.values.expand(batch, -1, -1, -1)) for lay in cache.layers
        ]
    )


def _cache_kw(base) -> str:
    """transformers renamed the forward's `past_key_values` to `cache` (5.x): whichever it takes."""
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _run(base, node: Node, cache, ids: torch.Tensor, lengths: Sequence[int], out: Dict[int, torch.Tensor]) -> None:
    """Forward `node`'s tokens after `cache` (its ancestors'; updated in place), then its leaves'
    suffixes after it, then each child after a fork of it."""
    from transformers import DynamicCache

    dev, kw = ids.device, _cache_kw(base)
    if node.tokens:
        cache = DynamicCache() if cache is None else cache
        pos = torch.arange(node.start, node.end, device=dev)[None]
        base(input_ids=torch.tensor([node.tokens], device=dev), position_ids=pos, use_cache=True, **{kw: cache})
    for batch in node.batches:
        s = node.end
        width = max(lengths[i] for i in batch) - s
        pos = torch.arange(s, s + width, device=dev)[None].expand(len(batch), -1)
        fork = {kw: _fork(cache, len(batch)), "use_cache": True} if cache is not None else {}
        h = base(input_ids=ids[batch, s : s + width], position_ids=pos, **fork).last_hidden_state
        for j, i in enumerate(batch):
            out[i] = h[j]
    for child in node.children:
        _run(base, child, _fork(cache, 1), ids, lengths, out)


def tree_hidden(base, ids: torch.Tensor, lengths: Sequence[int], tree: Node, keep: torch.Tensor) -> torch.Tensor:
    """The backbone's last hidden states at the label positions `keep` ([B, L-1] bool), in
    row-major order (as `hidden[:, :-1][keep]` of a padded forward), each prefix computed once."""
    out: Dict[int, torch.Tensor] = {}
    _run(base, tree, None, ids, lengths, out)
    leaf = _leaf_starts(tree)
    starts = [leaf[i] for i in range(ids.shape[0])]
    before = torch.arange(keep.shape[1], device=keep.device)[None] < torch.tensor(starts, device=keep.device)[:, None]
    if (keep & before).any():  # the tree shares prompt tokens only: cannot happen
        raise ValueError("learner.shared_prefix: a label position lies in a shared prefix")
    return torch.cat([out[i][: n - 1 - s][keep[i, s : n - 1]] for i, (s, n) in enumerate(zip(starts, lengths))])


def _leaf_starts(node: Node, acc: Optional[Dict[int, int]] = None) -> Dict[int, int]:
    acc = {} if acc is None else acc
    for i in node.leaves:
        acc[i] = node.end
    for c in node.children:
        _leaf_starts(c, acc)
    return acc


def check_model(config: PretrainedConfig, gradient_checkpointing: bool) -> None:
    """Refuse what the tree forward cannot run: a cache that is not one plain key/value run per
    layer (sliding windows), and gradient checkpointing (transformers drops the cache under it)."""
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        raise ValueError(f"learner.shared_prefix: layer types {sorted(kinds)} are not supported; set it to false")
    if gradient_checkpointing:
        raise ValueError("learner.shared_prefix: true needs learner.gradient_checkpointing: false")
