"""The running batch's KV cache: left-padded rows in buffers with spare room.

transformers' `DynamicLayer` appends with `torch.cat`, copying the whole cache every decode
step; here each layer's keys and values live in a buffer with spare rows and columns, a decode
step writes its one column in place, rows that join a batch at least as wide as they are written
into spare rows, and the whole batch is copied only when the buffers lack room (or a row longer
than the batch joins, which moves every row's columns).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from transformers.cache_utils import Cache, DynamicLayer

HEADROOM = 64  # spare columns added whenever a buffer is (re)allocated


def spare_rows(rows: int) -> int:
    """Rows allocated beyond `rows`: joiners fill them without a copy of the batch."""
    return max(8, rows // 2)


class BatchKVLayer(DynamicLayer):
    """One layer's keys and values: the first `rows` rows and `length` columns of buffers
    [row capacity, heads, column capacity, dim]; `keys` / `values` are views of that part."""

    def __init__(
        self, keys: Optional[torch.Tensor] = None, values: Optional[torch.Tensor] = None, length: int = 0, rows: int = 0
    ):
        super().__init__()
        self._k, self._v, self.length, self.rows = keys, values, length, rows
        if keys is not None:
            self._expose()

    def _expose(self) -> None:
        self.keys = self._k[: self.rows, :, : self.length]
        self.values = self._v[: self.rows, :, : self.length]
        self.is_initialized = True
        self.device = self._k.device

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self._k is None:
            self.rows = key_states.shape[0]
        if self._k is None or self.length + n > self._k.shape[2]:
            self._k = _with_room(self._k, key_states, self.rows, self.length, n)
            self._v = _with_room(self._v, value_states, self.rows, self.length, n)
        self._k[: self.rows, :, self.length : self.length + n] = key_states
        self._v[: self.rows, :, self.length : self.length + n] = value_states
        self.length += n
        self._expose()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length


def _with_room(buf: Optional[torch.Tensor], like: torch.Tensor, rows: int, used: int, extra: int) -> torch.Tensor:
    """A buffer with room for `extra` more columns (doubling), as many rows as `buf` has."""
    _, h, _, d = like.shape
    capacity = rows if buf is None else buf.shape[0]
    new = like.new_zeros((capacity, h, max(2 * (used + extra), used + extra + HEADROOM), d))
    if buf is not None:
        new[:rows, :, :used] = buf[:rows, :, :used]
    return new


def empty_cache(num_layers: int) -> Cache:
    return Cache(layers=[BatchKVLayer() for _ in range(num_layers)])


def from_prefix(layers: Sequence[Tuple[torch.Tensor, torch.Tensor]]) -> Cache:
    """A one-row cache holding a stored prefix (per layer keys, values as [heads, tokens, dim]),
    copied into buffers with room for the suffix that is prefilled after it."""
    n = layers[0][0].shape[1]
    return Cache(
        layers=[BatchKVLayer(_spare(k[None], HEADROOM, 0), _spare(v[None], HEADROOM, 0), n, 1) for k, v in layers]
    )


def select_rows(cache: Cache, rows: torch.Tensor, trim: int) -> Cache:
    """The cache of some rows, without the first `trim` (padding) columns."""
    out: List[BatchKVLayer] = []
    b = rows.shape[0]
    for layer in cache.layers:
        k, v = layer.keys[rows, :, trim:], layer.values[rows, :, trim:]
        out.append(BatchKVLayer(_spare(k, HEADROOM, spare_rows(b)), _spare(v, HEADROOM, spare_rows(b)), k.shape[2], b))
    return Cache(layers=out)


def move_rows(cache: Cache, moves: Sequence[Tuple[int, int]], rows: int) -> Cache:
    """The same cache, in place, with row `src` copied over row `dst` for each move, cut to its
    first `rows` rows (the buffers keep their capacity: no copy of the rows that stay)."""
    for layer in cache.layers:
        n = layer.length
        for src, dst in moves:
            layer._k[dst, :, :n] = layer._k[src, :, :n]
            layer._v[dst, :, :n] = layer._v[src, :, :n]
        layer.rows = rows
        layer._expose()
    return cache


def append(cache: Cache, parts: Sequence[Tuple[Cache, int]]) -> bool:
    """Write the rows of every part (its length) after the rows of `cache`, in place,
    right-aligned to its columns with zeros on their left, as `merge` would place them; False,
    with nothing written, when a part is longer than the cache or the buffers lack rows."""
    first = cache.layers[0]
    joining = sum(c.layers[0].rows for c, _ in parts)
    if any(n > first.length for _, n in parts) or first.rows + joining > first._k.shape[0]:
        return False
    for i, layer in enumerate(cache.layers):
        width, row = layer.length, layer.rows
        for part, n in parts:
            src = part.layers[i]
            b = src.rows
            for buf, t in ((layer._k, src.keys), (layer._v, src.values)):
                buf[row : row + b, :, : width - n] = 0
                buf[row : row + b, :, width - n : width] = t
            row += b
        layer.rows = row
        layer._expose()
    return True


def merge(parts: Sequence[Tuple[Cache, int]]) -> Cache:
    """The rows of every cache in order, each left-padded with zeros by its own amount to one
    common length, written into one new buffer per layer (with spare rows and columns)."""
    width = parts[0][0].layers[0].length + parts[0][1]
    total = sum(c.layers[0].rows for c, _ in parts)
    out: List[BatchKVLayer] = []
    for i, first in enumerate(parts[0][0].layers):
        _, h, _, d = first.keys.shape
        k = first.keys.new_zeros((total + spare_rows(total), h, width + HEADROOM, d))
        v = first.values.new_zeros((total + spare_rows(total), h, width + HEADROOM, d))
        row = 0
        for cache, pad in parts:
            layer = cache.layers[i]
            b = layer.rows
            k[row : row + b, :, pad:width] = layer.keys
            v[row : row + b, :, pad:width] = layer.values
            row += b
        out.append(BatchKVLayer(k, v, width, total))
    return Cache(layers=out)


def _spare(t: torch.Tensor, columns: int, rows: int) -> torch.Tensor:
    """A copy of `t` in a buffer with `columns` and `rows` to spare."""
    b, h, n, d = t.shape
    out = t.new_zeros((b + rows, h, n + columns, d))
    out[:b, :, :n] = t
    return out
