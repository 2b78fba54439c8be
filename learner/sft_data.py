"""Context rows for supervised fine-tuning, from jsonl or Arrow files.

A row needs `input_ids`, `prompt_len` and `loss_mask` (per response token; the
loss covers the 1s); other keys or columns are ignored, so rollout dumps and the
oracle's demonstrations load alike. A bad row is reported with its file and line.
"""

from __future__ import annotations

import os
from typing import Iterable, List

from areal_mem.jsonl import iter_jsonl

from .batch import TrainRow

REQUIRED = ("input_ids", "prompt_len", "loss_mask")


class SFTDataError(ValueError):
    pass


def _row(d: dict, where: str) -> TrainRow:
    if not isinstance(d, dict):
        raise SFTDataError(f"{where}: expected an object with {', '.join(REQUIRED)}")
    missing = [k for k in REQUIRED if k not in d]
    if missing:
        raise SFTDataError(f"{where}: missing key(s) {', '.join(missing)}")
    ids, plen, mask = d["input_ids"], d["prompt_len"], d["loss_mask"]
    if not (isinstance(ids, list) and all(isinstance(t, int) and t >= 0 for t in ids)):
        raise SFTDataError(f"{where}: input_ids must be a list of non-negative integers")
    if not isinstance(plen, int) or not 1 <= plen <= len(ids):
        raise SFTDataError(f"{where}: prompt_len {plen!r} must be an integer in 1..{len(ids)}")
    if not (isinstance(mask, list) and len(mask) == len(ids) - plen and all(m in (0, 1) for m in mask)):
        raise SFTDataError(f"{where}: loss_mask must be {len(ids) - plen} values of 0/1 (one per response token)")
    n = len(mask)
    return TrainRow(ids, plen, mask, [0.0] * n, [-1] * n, [0.0] * n)


def read_rows(path: str) -> List[TrainRow]:
    if not os.path.isfile(path):
        raise SFTDataError(f"{path}: no such file")
    if path.endswith((".jsonl", ".json")):
        return [_row(d, where) for where, d in iter_jsonl(path, SFTDataError)]
    if path.endswith((".arrow", ".feather", ".parquet")):
        return _read_arrow(path)
    raise SFTDataError(f"{path}: unknown format (expected .jsonl, .arrow, .feather or .parquet)")


def _read_arrow(path: str) -> List[TrainRow]:
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    try:
        if path.endswith(".parquet"):
            table = pq.read_table(path)
        else:
            try:
                table = feather.read_table(path)
            except pa.ArrowInvalid:
                with pa.memory_map(path) as src:
                    table = pa.ipc.open_stream(src).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise SFTDataError(f"{path}: not a readable Arrow/Parquet file: {e}") from None
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise SFTDataError(f"{path}: missing column(s) {', '.join(missing)}")
    cols = {c: table.column(c).to_pylist() for c in REQUIRED}
    return [_row({c: cols[c][i] for c in REQUIRED}, f"{path}: row {i}") for i in range(table.num_rows)]


def read_all(paths: Iterable[str]) -> List[TrainRow]:
    rows: List[TrainRow] = []
    for p in paths:
        rows.extend(read_rows(p))
    if not rows:
        raise SFTDataError("no SFT rows: set learner.sft.data to jsonl/Arrow files of context rows")
    return rows
