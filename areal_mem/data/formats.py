"""Pick the reader or writer of a question file by its format (or its file name)."""

from __future__ import annotations

from enum import Enum
from typing import Iterable, List

from .errors import DataError
from .flashrag import read_flashrag, write_flashrag
from .searchr1 import read_searchr1, write_searchr1
from .task import Task


class DataFormat(str, Enum):
    flashrag = "flashrag"  # jsonl, also areal-mem's task format
    searchr1 = "searchr1"  # parquet


def guess_format(path: str) -> DataFormat:
    if path.endswith((".jsonl", ".json")):
        return DataFormat.flashrag
    if path.endswith(".parquet"):
        return DataFormat.searchr1
    raise DataError(
        f"{path}: cannot tell the format from the name; use .jsonl or .parquet "
        f"or name it ({', '.join(f.value for f in DataFormat)})"
    )


def read_tasks(path: str, fmt: DataFormat | str | None = None) -> List[Task]:
    fmt = DataFormat(fmt) if fmt else guess_format(path)
    return read_flashrag(path) if fmt is DataFormat.flashrag else read_searchr1(path)


def write_tasks(tasks: Iterable[Task], path: str, fmt: DataFormat | str | None = None) -> int:
    fmt = DataFormat(fmt) if fmt else guess_format(path)
    return write_flashrag(tasks, path) if fmt is DataFormat.flashrag else write_searchr1(tasks, path)
