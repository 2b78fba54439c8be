"""The four released question formats: detect, read (streamed), write.

| format | file | answers from | own id |
| --- | --- | --- | --- |
| flashrag | jsonl | `golden_answers` | `id` |
| asearcher | jsonl | `answer` (string or list) | `idx`, else `qid`, else `id` |
| searchr1 | parquet | `golden_answers`, else `reward_model.ground_truth.target` | `id` |
| memsearcher | parquet | `reward_model.ground_truth` (a list) | `extra_info.id` |

Without an own id a question gets `<file stem>-<row>` (records.IdRule). The format is detected
from the file's content: a jsonl file by the keys of its first line (`golden_answers`:
FlashRAG, `answer`: ASearcher), a parquet file by its columns (parquet.parquet_format); a file
whose name says neither is recognised by its first bytes. A format named by the caller wins.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Dict, Iterable, Iterator, List, Tuple

from ..jsonl import iter_jsonl
from .asearcher import asearcher_record
from .errors import DataError
from .flashrag import flashrag_record, write_flashrag
from .parquet import iter_parquet_rows, open_parquet, parquet_format, parquet_row
from .records import IdRule, Parsed, TextLimits
from .searchr1 import write_searchr1
from .task import Task

log = logging.getLogger(__name__)


class DataFormat(str, Enum):
    flashrag = "flashrag"  # jsonl, also areal-mem's task format
    asearcher = "asearcher"  # jsonl (ASearcher-train-data)
    searchr1 = "searchr1"  # parquet
    memsearcher = "memsearcher"  # parquet


JSONL_FORMATS = (DataFormat.flashrag, DataFormat.asearcher)
WRITABLE = (DataFormat.flashrag, DataFormat.searchr1)
_JSONL_PARSERS: Dict[DataFormat, Callable[[object, str], Parsed]] = {
    DataFormat.flashrag: flashrag_record,
    DataFormat.asearcher: asearcher_record,
}


@dataclass
class ReadReport:
    """What a read found; `describe()` is the line `areal-mem data convert` prints."""

    path: str
    format: DataFormat
    how: str  # why this format: "named", "detected: ..."
    rows: int = 0
    ids_made: int = 0  # `<stem>-<row>`: the file had no id for them
    ids_repeated: int = 0  # `<id>#<row>`: the id was met before in the file

    def describe(self) -> str:
        line = f"read {self.rows} questions from {self.path} ({self.format.value}, {self.how})"
        if self.ids_made:
            line += f"; {self.ids_made} without an id got <file stem>-<row>"
        if self.ids_repeated:
            line += f"; {self.ids_repeated} repeated ids got a #<row> suffix"
        return line


def _container(path: str) -> str:
    if path.endswith((".jsonl", ".json")):
        return "jsonl"
    if path.endswith(".parquet"):
        return "parquet"
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.lstrip()[:1] == b"{":
        return "jsonl"
    raise DataError(
        f"{path}: cannot tell the format: neither jsonl nor parquet by its name or first bytes; "
        f"name it ({', '.join(f.value for f in DataFormat)})"
    )


def _first_record(path: str) -> object:
    try:
        for _, record in iter_jsonl(path, DataError):
            return record
    except DataError:
        pass  # the reader reports it, with its line
    return None


def detect_format(path: str) -> Tuple[DataFormat, str]:
    """(format, why) from the file's content; DataError when it is none of the four."""
    if _container(path) == "parquet":
        name, why = parquet_format(path, open_parquet(path).schema_arrow)
        return DataFormat(name), f"detected: {why}"
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    record = _first_record(path)
    if isinstance(record, dict) and "golden_answers" not in record and "answer" in record:
        return DataFormat.asearcher, "detected: the first line has 'answer', no 'golden_answers'"
    return DataFormat.flashrag, "detected: jsonl with 'golden_answers'"


def iter_tasks(
    path: str,
    fmt: DataFormat | str | None = None,
    report: ReadReport | None = None,
    limits: TextLimits = TextLimits(),
) -> Iterator[Task]:
    """The file's tasks one by one (jsonl line by line, parquet in batches); ids by IdRule.

    `report`, when given, is filled in as the rows go by (its format and reason at once); a
    question or answer over `limits` is refused at its row.
    """
    if fmt:
        fmt, how = DataFormat(fmt), "named"
    else:
        fmt, how = detect_format(path)
    report = report or ReadReport(path, fmt, how)
    report.path, report.format, report.how = path, fmt, how
    ids = IdRule(path)
    rows: Iterator[Tuple[int, str, Parsed]]
    if fmt in JSONL_FORMATS:
        parse = _JSONL_PARSERS[fmt]
        rows = ((n, where, parse(record, where)) for n, (where, record) in enumerate(iter_jsonl(path, DataError)))
    else:
        pf = open_parquet(path)
        parquet_format(path, pf.schema_arrow)  # refuses a parquet file that holds no questions
        rows = (
            (i, f"{path}: row {i}", parquet_row(record, f"{path}: row {i}"))
            for i, record in iter_parquet_rows(path, pf)
        )
    for row, where, parsed in rows:
        limits.check(parsed, where)
        task = Task(ids.assign(parsed.own_id, row), parsed.question, parsed.golden_answers, parsed.metadata)
        report.rows, report.ids_made, report.ids_repeated = report.rows + 1, ids.made, ids.repeated
        yield task


def read_tasks(path: str, fmt: DataFormat | str | None = None, limit: int = 0) -> List[Task]:
    """All tasks of the file (the first `limit` when > 0; the rest is not read)."""
    report = ReadReport(path, DataFormat.flashrag, "")
    stream = iter_tasks(path, fmt, report)
    tasks = list(itertools.islice(stream, limit) if limit > 0 else stream)
    log.info(report.describe())
    return tasks


def guess_output_format(path: str) -> DataFormat:
    if path.endswith((".jsonl", ".json")):
        return DataFormat.flashrag
    if path.endswith(".parquet"):
        return DataFormat.searchr1
    raise DataError(
        f"{path}: cannot tell the format from the name; use .jsonl or .parquet "
        f"or name it ({', '.join(f.value for f in WRITABLE)})"
    )


def write_tasks(tasks: Iterable[Task], path: str, fmt: DataFormat | str | None = None) -> int:
    fmt = DataFormat(fmt) if fmt else guess_output_format(path)
    if fmt not in WRITABLE:
        raise DataError(f"{path}: cannot write {fmt.value}; areal-mem writes {', '.join(f.value for f in WRITABLE)}")
    return write_flashrag(tasks, path) if fmt is DataFormat.flashrag else write_searchr1(tasks, path)


def convert(
    src: str,
    dst: str,
    src_fmt: str | None = None,
    dst_fmt: str | None = None,
    limit: int = 0,
    limits: TextLimits = TextLimits(),
) -> Tuple[ReadReport, int]:
    """Stream SRC into DST (the first `limit` questions when > 0); DST appears only when all went well."""
    out_fmt = DataFormat(dst_fmt) if dst_fmt else guess_output_format(dst)
    report = ReadReport(src, DataFormat.flashrag, "")
    stream: Iterable[Task] = iter_tasks(src, src_fmt, report, limits)
    if limit > 0:
        stream = itertools.islice(stream, limit)
    n = write_tasks(stream, dst, out_fmt)
    return report, n
