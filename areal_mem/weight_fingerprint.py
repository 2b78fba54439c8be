"""A cheap, exact fingerprint of a weight tensor that the learner and a generator both compute.

After a push the learner compares, tensor by tensor, the fingerprint of what it pushed with the
one each generator reports for what it now serves (`/weights_checker`). Both sides must get
bit-identical values although they hash on different devices (a learner GPU and a generator
GPU, or two CPUs), with different kernels and reduction orders. Floating-point sums are not
order-independent, so the fingerprint is integer arithmetic on the raw bits:

- the tensor, cast to the dtype the generator serves (a learner training in fp32 casts its copy
  to the generator's bf16 exactly as the generator's own load does), is viewed as integers of
  its element size (int16 for bf16/fp16, int32 for fp32) without a copy;
- with `i` the flat position and `x_i` those integers, it is `s0 = sum(x_i)` (exact in int64:
  one changed element always changes it) and `s1 = sum((i + 1) * x_i) mod P` with the prime
  `P = 2**31 - 1` (elements swapped at positions i, j change it by `(x_i - x_j)(i - j) mod P`,
  never zero for bf16 and for fp32 unless the bits differ by a multiple of P).

Each chunk of the tensor is one float64 matrix product: the bits as a `[rows, COLS]` matrix times
the two columns `(1, c + 1)`. Every product and partial sum is an integer below 2**53, so the
float64 arithmetic is exact whatever the order, FMA or blocking of the BLAS; what is left (one
pair per row, 1/1024 of the data) is combined in int64 modulo P. So the cost is one cast into a
reused buffer and one read of the tensor on its own device, and one host transfer per call of
`fingerprints`; no custom kernel, so it runs wherever torch does.

A fingerprint is `"<dtype>:<s0 as 16 hex><s1 as 8 hex>"`: the dtype tells the learner which
cast to hash (and marks the scheme: SGLang's own `/weights_checker` answers bare sha256 hex
over its fused tensors, which no learner can reproduce).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from areal_mem.weight_transport import dtype_name, parse_dtype

P = 2**31 - 1
COLS = 1024  # row length of the matrix view: keeps every float64 partial sum below 2**53
# rows per matrix product: the float64 buffer is reused for every chunk, 2 MiB on a CPU (it stays
# in cache between its write and its read), 32 MiB on a GPU (few kernel launches, and it can stay
# in an H100/H200's 50 MiB L2)
CHUNK_ROWS = {"cpu": 256}
GPU_CHUNK_ROWS = 4096
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32}


class _RowSums:
    """Per row of COLS elements of each tensor, `[sum, weighted sum]` in float64 on its device:
    one copy into a reused buffer and one matrix product per chunk, nothing else per tensor (a
    3B model has ~430 tensors: per-tensor kernel launches would cost more than the reading)."""

    def __init__(self):
        self.buf: Dict[torch.device, torch.Tensor] = {}
        self.weights: Dict[torch.device, torch.Tensor] = {}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        bits_dtype = _BITS.get(t.element_size())
        if bits_dtype is None:
            raise ValueError(f"cannot fingerprint {t.dtype} tensors (elements of 1, 2 or 4 bytes only)")
        bits = t.contiguous().view(-1).view(bits_dtype)
        dev = t.device
        f64: Dict[str, Any] = dict(dtype=torch.float64, device=dev)
        if dev not in self.weights:
            self.weights[dev] = torch.stack([torch.ones(COLS, **f64), torch.arange(1, COLS + 1, **f64)], dim=1)
        weights = self.weights[dev]
        rows, tail = divmod(bits.numel(), COLS)
        step = CHUNK_ROWS.get(dev.type, GPU_CHUNK_ROWS)
        need = min(rows, step) * COLS or tail
        if self.buf.get(dev) is None or self.buf[dev].numel() < need:
            self.buf[dev] = torch.empty(need, **f64)
        buf = self.buf[dev]
        out = torch.empty(rows + (tail > 0), 2, **f64)
        for r0 in range(0, rows, step):
            r = min(step, rows - r0)
            buf[: r * COLS].copy_(bits[r0 * COLS : (r0 + r) * COLS])
            torch.mm(buf[: r * COLS].view(r, COLS), weights, out=out[r0 : r0 + r])
        if tail:
            buf[:tail].copy_(bits[rows * COLS :])
            torch.mm(buf[:tail].view(1, tail), weights[:tail], out=out[rows:])
        return out


def _combine(outs: List[torch.Tensor]) -> List[Tuple[int, int]]:
    """`(s0, s1)` of each tensor from its row sums, all tensors at once; one host transfer."""
    dev = outs[0].device
    counts = [o.shape[0] for o in outs]
    rows = torch.cat([o.to(dev) for o in outs]).to(torch.int64)  # exact: integers below 2**53
    n = torch.tensor(counts, device=dev)
    seg = torch.repeat_interleave(torch.arange(len(outs), device=dev), n, output_size=rows.shape[0])
    start = torch.cumsum(n, 0) - n  # each tensor's first row
    first = COLS * (torch.arange(rows.shape[0], device=dev) - start[seg])  # a row's first position in its tensor
    # over a row, sum of (first + c + 1) * x_c = first * rowsum + weighted rowsum, taken mod P
    term = (first % P) * (rows[:, 0] % P) % P + rows[:, 1] % P
    s0 = torch.zeros(len(outs), dtype=torch.int64, device=dev).index_add_(0, seg, rows[:, 0])
    s1 = torch.zeros(len(outs), dtype=torch.int64, device=dev).index_add_(0, seg, term) % P
    return [tuple(v) for v in torch.stack([s0, s1], dim=1).cpu().tolist()]


def fingerprint(t: torch.Tensor, dtype: Optional[torch.dtype] = None) -> str:
    """The fingerprint of `t`, cast to `dtype` first when given (the dtype the generator serves)."""
    return fingerprint_items([("", t, dtype or t.dtype)])[0][1]


def fingerprints(
    named: Iterable[Tuple[str, torch.Tensor]], dtypes: Optional[Dict[str, torch.dtype]] = None
) -> Dict[str, str]:
    """name -> fingerprint of each tensor, cast to `dtypes[name]` where given."""
    return dict(fingerprint_items((n, t, (dtypes or {}).get(n, t.dtype)) for n, t in named))


def fingerprint_items(items: Iterable[Tuple[str, torch.Tensor, torch.dtype]]) -> List[Tuple[str, str]]:
    """(name, fingerprint of the tensor cast to dtype) for each (name, tensor, dtype), in order.
    Streams: a tensor is not kept after its turn (ZeRO-3 gathers one at a time); one host transfer."""
    names, outs = [], []
    row_sums = _RowSums()
    for name, t, dtype in items:
        names.append((name, dtype_name(dtype)))
        outs.append(row_sums(t.detach().to(dtype)))
    if not outs:
        return []
    return [(n, f"{label}:{s0 & (2**64 - 1):016x}{s1:08x}") for (n, label), (s0, s1) in zip(names, _combine(outs))]


def served_dtype(fp: str) -> torch.dtype:
    """The dtype a fingerprint was computed in; ValueError if `fp` is not a fingerprint of this module
    (e.g. SGLang's own checksum)."""
    label, sep, digits = fp.partition(":")
    if not sep or len(digits) != 24 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"{fp[:70]!r} is not an areal-mem weight fingerprint ('<dtype>:<24 hex digits>')")
    return parse_dtype(label)
