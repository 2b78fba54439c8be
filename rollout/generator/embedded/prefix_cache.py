"""KV of finished sequences, reused as the prefix of later prompts: SGLang's radix cache, flat.

A MemSearcher turn asks twice on one context: the action, then the memory, whose prompt is the
action's prompt and output plus the tool response; and every context of a run starts with the
same system prompt. Without a cache both are prefilled again. Each finished (or pause-aborted)
sequence leaves its KV here under its token ids; a new prompt takes the longest stored prefix
and only its own suffix is prefilled. Entries hold the weights' KV, so any weight change
empties the cache (as SGLang flushes its radix cache on an update); an LRU over a token budget
bounds the memory (keys and values of every layer per token).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

Layers = List[Tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values as [heads, tokens, dim]


@dataclass
class _Entry:
    ids: torch.Tensor  # int64 [tokens], on the CPU
    layers: Layers


class PrefixCache:
    def __init__(self, max_tokens: int, min_hit: int = 16) -> None:
        """`max_tokens`: tokens of KV held at most (0: off); `min_hit`: shorter shared prefixes
        are not worth a prefill of their own."""
        self.max_tokens, self.min_hit = max_tokens, min_hit
        self._entries: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0

    def insert(self, ids: Sequence[int], layers: Layers) -> None:
        """Keep `layers` (owned from now on) as the KV of `ids`; the least recently used entries
        go when the budget is passed. A prefix of a stored sequence adds nothing."""
        n = len(ids)
        if self.max_tokens <= 0 or n < self.min_hit or n > self.max_tokens:
            return
        key = tuple(ids)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        if self._longest(torch.tensor(ids))[0] == n:
            return
        new = _Entry(torch.tensor(ids, dtype=torch.long), layers)
        for old_key, old in list(self._entries.items()):  # the new entry serves its prefixes too
            if len(old.ids) < n and torch.equal(old.ids, new.ids[: len(old.ids)]):
                del self._entries[old_key]
                self.tokens -= len(old.ids)
        self._entries[key] = new
        self.tokens += n
        while self.tokens > self.max_tokens:
            _, old = self._entries.popitem(last=False)
            self.tokens -= len(old.ids)

    def lookup(self, ids: Sequence[int]) -> Tuple[int, Layers]:
        """The longest stored prefix of `ids` (at least `min_hit`, at most all but the last token,
        whose logits the caller needs): its length and its KV (views), or (0, [])."""
        if not self._entries or len(ids) <= self.min_hit:
            return 0, []
        n, entry = self._longest(torch.tensor(ids[:-1], dtype=torch.long))
        if entry is None or n < self.min_hit:  # no entry: n is 0
            return 0, []
        self._entries.move_to_end(tuple(entry.ids.tolist()))
        return n, [(k[:, :n], v[:, :n]) for k, v in entry.layers]

    def _longest(self, query: torch.Tensor) -> Tuple[int, Optional[_Entry]]:
        best, best_entry = 0, None
        for entry in reversed(self._entries.values()):  # most recent first: ties go to it
            m = min(len(query), len(entry.ids))
            if m <= best:
                continue
            differ = (query[:m] != entry.ids[:m]).nonzero()
            n = int(differ[0]) if len(differ) else m
            if n > best:
                best, best_entry = n, entry
        return best, best_entry
