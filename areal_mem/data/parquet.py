"""Question parquet files as Search-R1 and MemSearcher release them, read in streamed batches.

Search-R1 (`scripts/data_process/nq_search.py`, `qa_search_train_merge.py`): a datasets `.map`
over FlashRAG's rows, so the source columns `id`, `question`, `golden_answers` stay, next to
`data_source`, `prompt` (chat list), `ability`, `reward_model = {style, ground_truth: {target:
[answers]}}` and `extra_info = {split, index}`; written by `Dataset.to_parquet` (nested structs).

MemSearcher (`data/prepare_train_data.py`): `data_source` ("musique_re_call"), `question` ("?"
appended), `ability`, `reward_model = {ground_truth: [answers], style: "rule"}` (a list, from a
numpy object array through pandas) and `extra_info = {env, func_schemas, index, split}`; no `id`,
no `golden_answers`. Its `prepare_musique_recall.py` and `convert2parquet.py` put the FlashRAG id
in `extra_info.id` instead.

Answers come from `golden_answers` when the row has them, else `reward_model.ground_truth`
(`{target: [...]}`, a list, or one string). `extra_info.index` is not an id: it restarts at 0 for
every data source of a merged file. Only the columns read are decoded (not `prompt`, nor
MemSearcher's `env` / `func_schemas` strings), BATCH_ROWS rows at a time.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError
from .records import Parsed, answers_from, describe, id_from, json_value, question_from

BATCH_ROWS = 256  # rows decoded at a time: at the question limit (8,192 characters) a few MB
_TOP = ("id", "question", "golden_answers", "data_source", "metadata")


def open_parquet(path: str) -> pq.ParquetFile:
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None


def _child(schema: pa.Schema, name: str, child: str) -> pa.Field | None:
    if name not in schema.names:
        return None
    kind = schema.field(name).type
    if not pa.types.is_struct(kind) or kind.get_field_index(child) < 0:
        return None
    return kind.field(child)


def parquet_format(path: str, schema: pa.Schema) -> Tuple[str, str]:
    """("searchr1" | "memsearcher", why) from the columns alone."""
    if "golden_answers" in schema.names:
        return "searchr1", "a 'golden_answers' column"
    truth = _child(schema, "reward_model", "ground_truth")
    if truth is not None and pa.types.is_struct(truth.type):
        return "searchr1", "'reward_model.ground_truth' is a struct ({target: [...]})"
    if "reward_model" in schema.names:
        shape = "a list" if truth is not None and pa.types.is_list(truth.type) else "not a struct"
        return "memsearcher", f"no 'golden_answers'; 'reward_model.ground_truth' is {shape}"
    raise DataError(
        f"{path}: not a question file: no 'golden_answers' and no 'reward_model' column "
        f"(columns: {', '.join(schema.names)})"
    )


def _columns(schema: pa.Schema) -> List[str]:
    cols = [c for c in _TOP if c in schema.names]
    if "reward_model" in schema.names:
        has_truth = _child(schema, "reward_model", "ground_truth") is not None
        cols.append("reward_model.ground_truth" if has_truth else "reward_model")
    if _child(schema, "extra_info", "id") is not None:
        cols.append("extra_info.id")
    return cols


def iter_parquet_rows(path: str, pf: pq.ParquetFile | None = None) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """(row, the row's read columns as Python values), BATCH_ROWS rows decoded at a time."""
    pf = pf or open_parquet(path)
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=_columns(pf.schema_arrow)):
            for record in batch.to_pylist():
                yield row, record
                row += 1
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: row {row}: unreadable parquet data ({e})") from None


def parquet_row(record: Dict[str, Any], where: str) -> Parsed:
    question = question_from(record.get("question"), where)
    golden = record.get("golden_answers")
    if golden is not None:
        answers = answers_from(golden, where, "golden_answers")
    else:
        answers = _ground_truth(record.get("reward_model"), where)
    extra = record.get("extra_info")
    own = id_from(record.get("id"), where, "id")
    if own is None and isinstance(extra, dict):
        own = id_from(extra.get("id"), where, "extra_info.id")
    metadata = record.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise DataError(f"{where}: 'metadata' must be a struct (got {describe(metadata)})")
    metadata = json_value(dict(metadata or {}), where, "metadata")
    source = record.get("data_source")
    if source is not None:
        if not isinstance(source, str):
            raise DataError(f"{where}: 'data_source' must be a string (got {describe(source)})")
        metadata["data_source"] = source
    return Parsed(own, question, answers, metadata)


def _ground_truth(reward_model: Any, where: str) -> List[str]:
    if reward_model is None:
        raise DataError(f"{where}: no answers: 'golden_answers' and 'reward_model.ground_truth' are both missing")
    if not isinstance(reward_model, dict):
        raise DataError(
            f"{where}: 'reward_model' must be an object {{ground_truth, style}} (got {describe(reward_model)})"
        )
    truth = reward_model.get("ground_truth")
    if isinstance(truth, dict):
        if "target" not in truth:
            raise DataError(
                f"{where}: 'reward_model.ground_truth' has an unknown shape ({describe(truth)}); expected "
                f"a list of answers (MemSearcher) or {{target: [...]}} (Search-R1)"
            )
        return answers_from(truth["target"], where, "reward_model.ground_truth.target")
    if truth is None or isinstance(truth, (str, list, tuple)) or hasattr(truth, "tolist"):
        return answers_from(truth, where, "reward_model.ground_truth")
    raise DataError(
        f"{where}: 'reward_model.ground_truth' has an unknown shape ({describe(truth)}); expected a list "
        f"of answers (MemSearcher) or {{target: [...]}} (Search-R1)"
    )
