"""The running batch's KV cache: left-padded rows in buffers with spare room.

transformers' `DynamicLayer` appends with `torch.cat`, copying the whole cache every decode
step; here each layer's keys and values live in a buffer with spare columns, a decode step
writes its one column in place, and copies happen only when the batch changes (rows join,
leave, or the buffer is full).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from transformers.cache_utils import Cache, DynamicLayer

HEADROOM = 64  # spare columns added whenever a buffer is (re)allocated


class BatchKVLayer(DynamicLayer):
    def __init__(self, keys: Optional[torch.Tensor] = None, values: Optional[torch.Tensor] = None, length: int = 0):
        super().__init__()
        self._k, self._v, self.length = keys, values, length
        if keys is not None:
            self._expose()

    def _expose(self) -> None:
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]
        self.is_initialized = True
        self.device = self._k.device

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self._k is None or self.length + n > self._k.shape[2]:
            self._k = _with_room(self._k, key_states, self.length, n)
            self._v = _with_room(self._v, value_states, self.length, n)
        self._k[:, :, self.length : self.length + n] = key_states
        self._v[:, :, self.length : self.length + n] = value_states
        self.length += n
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


def _with_room(buf: Optional[torch.Tensor], like: torch.Tensor, used: int, extra: int) -> torch.Tensor:
    b, h, _, d = like.shape
    new = like.new_zeros((b, h, max(2 * (used + extra), used + extra + HEADROOM), d))
    if buf is not None:
        new[:, :, :used] = buf[:, :, :used]
    return new


def empty_cache(num_layers: int) -> Cache:
    return Cache(layers=[BatchKVLayer() for _ in range(num_layers)])


def from_prefix(layers: Sequence[Tuple[torch.Tensor, torch.Tensor]]) -> Cache:
    """A one-row cache holding a stored prefix (per layer keys, values as [heads, tokens, dim]),
    copied into buffers with room for the suffix that is prefilled after it."""
    n = layers[0][0].shape[1]
    return Cache(layers=[BatchKVLayer(_pad(k[None], 0, HEADROOM), _pad(v[None], 0, HEADROOM), n) for k, v in layers])


def select_rows(cache: Cache, rows: torch.Tensor, trim: int) -> Cache:
    """The cache of some rows, without the first `trim` (padding) columns."""
    out: List[BatchKVLayer] = []
    for layer in cache.layers:
        k, v = layer.keys[rows, :, trim:], layer.values[rows, :, trim:]
        out.append(BatchKVLayer(_pad(k, 0, HEADROOM), _pad(v, 0, HEADROOM), k.shape[2]))
    return Cache(layers=out)


def move_rows(cache: Cache, moves: Sequence[Tuple[int, int]], rows: int) -> Cache:
    """The same cache, in place, with row `src` copied over row `dst` for each move, cut to its
    first `rows` rows (a view of the buffers: no copy of the rows that stay where they are)."""
    for layer in cache.layers:
        n = layer.length
        for src, dst in moves:
            layer._k[dst, :, :n] = layer._k[src, :, :n]
            layer._v[dst, :, :n] = layer._v[src, :, :n]
        layer._k, layer._v = layer._k[:rows], layer._v[:rows]
        layer._expose()
    return cache


def merge(parts: Sequence[Tuple[Cache, int]]) -> Cache:
    """The rows of every cache in order, each left-padded with zeros by its own amount to one
    common length, written into one new buffer per layer."""
    width = parts[0][0].layers[0].length + parts[0][1]
    total = sum(c.layers[0].keys.shape[0] for c, _ in parts)
    out: List[BatchKVLayer] = []
    for i, first in enumerate(parts[0][0].layers):
        _, h, _, d = first.keys.shape
        k = first.keys.new_zeros((total, h, width + HEADROOM, d))
        v = first.values.new_zeros((total, h, width + HEADROOM, d))
        row = 0
        for cache, pad in parts:
            layer = cache.layers[i]
            b = layer.keys.shape[0]
            k[row : row + b, :, pad:width] = layer.keys
            v[row : row + b, :, pad:width] = layer.values
            row += b
        out.append(BatchKVLayer(k, v, width))
    return Cache(layers=out)


def _pad(t: torch.Tensor, left: int, right: int) -> torch.Tensor:
    b, h, n, d = t.shape
    out = t.new_zeros((b, h, left + n + right, d))
    out[:, :, left : left + n] = t
    return out
