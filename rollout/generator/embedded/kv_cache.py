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
        self._k: Optional[torch.Tensor] = keys
        self._v: Optional[torch.Tensor] = values
        self.length, self.rows = length, rows
        if keys is not None:
            self._expose()

    def buffers(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The key and value buffers (with their spare room); a layer not yet written has none."""
        if self._k is None or self._v is None:
            raise RuntimeError("a KV layer's buffers are read before its first update")
        return self._k, self._v

    def kv(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The written part of the buffers: `keys` and `values` (transformers types them optional)."""
        if self.keys is None or self.values is None:
            raise RuntimeError("a KV layer is read before its first update")
        return self.keys, self.values

    def _expose(self) -> None:
        k, v = self.buffers()
        self.keys = k[: self.rows, :, : self.length]
        self.values = v[: self.rows, :, : self.length]
        self.is_initialized = True
        self.device = k.device

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self._k is None:
            self.rows = key_states.shape[0]
        if self._k is None or self.length + n > self._k.shape[2]:
            self._k = _with_room(self._k, key_states, self.rows, self.length, n)
            self._v = _with_room(self._v, value_states, self.rows, self.length, n)
        k, v = self.buffers()
        k[: self.rows, :, self.length : self.length + n] = key_states
        v[: self.rows, :, self.length : self.length + n] = value_states
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


def layers_of(cache: Cache) -> List[BatchKVLayer]:
    """The layers of a cache this module built (transformers types them as any cache layer)."""
    layers = cache.layers
    if not all(isinstance(layer, BatchKVLayer) for layer in layers):
        raise TypeError("the cache was not built by areal_mem's kv_cache (a layer is not a BatchKVLayer)")
    return layers  # type: ignore[return-value]  # checked just above, element by element


def _cache(layers: List[BatchKVLayer]) -> Cache:
    return Cache(layers=[*layers])  # a list of the union transformers expects (lists are invariant)


def empty_cache(num_layers: int) -> Cache:
    return _cache([BatchKVLayer() for _ in range(num_layers)])


def from_prefix(layers: Sequence[Tuple[torch.Tensor, torch.Tensor]]) -> Cache:
    """A one-row cache holding a stored prefix (per layer keys, values as [heads, tokens, dim]),
    copied into buffers with room for the suffix that is prefilled after it."""
    n = layers[0][0].shape[1]
    return _cache([BatchKVLayer(_spare(k[None], HEADROOM, 0), _spare(v[None], HEADROOM, 0), n, 1) for k, v in layers])


def select_rows(cache: Cache, rows: torch.Tensor, trim: int) -> Cache:
    """The cache of some rows, without the first `trim` (padding) columns."""
    out: List[BatchKVLayer] = []
    b = rows.shape[0]
    for layer in layers_of(cache):
        keys, values = layer.kv()
        k, v = keys[rows, :, trim:], values[rows, :, trim:]
        out.append(BatchKVLayer(_spare(k, HEADROOM, spare_rows(b)), _spare(v, HEADROOM, spare_rows(b)), k.shape[2], b))
    return _cache(out)


def move_rows(cache: Cache, moves: Sequence[Tuple[int, int]], rows: int) -> Cache:
    """The same cache, in place, with row `src` copied over row `dst` for each move, cut to its
    first `rows` rows (the buffers keep their capacity: no copy of the rows that stay)."""
    for layer in layers_of(cache):
        n = layer.length
        for buf in layer.buffers():
            for src, dst in moves:
                buf[dst, :, :n] = buf[src, :, :n]
        layer.rows = rows
        layer._expose()
    return cache


def append(cache: Cache, parts: Sequence[Tuple[Cache, int]]) -> bool:
    """Write the rows of every part (its length) after the rows of `cache`, in place,
    right-aligned to its columns with zeros on their left, as `merge` would place them; False,
    with nothing written, when a part is longer than the cache or the buffers lack rows."""
    first = layers_of(cache)[0]
    joining = sum(layers_of(c)[0].rows for c, _ in parts)
    if any(n > first.length for _, n in parts) or first.rows + joining > first.buffers()[0].shape[0]:
        return False
    for i, layer in enumerate(layers_of(cache)):
        width, row = layer.length, layer.rows
        k, v = layer.buffers()
        for part, n in parts:
            src = layers_of(part)[i]
            b = src.rows
            for buf, t in zip((k, v), src.kv()):
                buf[row : row + b, :, : width - n] = 0
                buf[row : row + b, :, width - n : width] = t
            row += b
        layer.rows = row
        layer._expose()
    return True


def merge(parts: Sequence[Tuple[Cache, int]]) -> Cache:
    """The rows of every cache in order, each left-padded with zeros by its own amount to one
    common length, written into one new buffer per layer (with spare rows and columns)."""
    width = layers_of(parts[0][0])[0].length + parts[0][1]
    total = sum(layers_of(c)[0].rows for c, _ in parts)
    out: List[BatchKVLayer] = []
    for i, first in enumerate(layers_of(parts[0][0])):
        keys, values = first.kv()
        _, h, _, d = keys.shape
        k = keys.new_zeros((total + spare_rows(total), h, width + HEADROOM, d))
        v = values.new_zeros((total + spare_rows(total), h, width + HEADROOM, d))
        row = 0
        for cache, pad in parts:
            layer = layers_of(cache)[i]
            b = layer.rows
            k[row : row + b, :, pad:width], v[row : row + b, :, pad:width] = layer.kv()
            row += b
        out.append(BatchKVLayer(k, v, width, total))
    return _cache(out)


def _spare(t: torch.Tensor, columns: int, rows: int) -> torch.Tensor:
    """A copy of `t` in a buffer with `columns` and `rows` to spare."""
    b, h, n, d = t.shape
    out = t.new_zeros((b + rows, h, n + columns, d))
    out[:b, :, :n] = t
    return out
