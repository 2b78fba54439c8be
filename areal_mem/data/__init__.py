"""Question files: the released formats (FlashRAG and ASearcher jsonl, Search-R1 and MemSearcher
parquet) read streamed, FlashRAG jsonl and Search-R1 parquet written, and the converter."""

from .errors import DataError
from .formats import DataFormat, ReadReport, convert, detect_format, iter_tasks, read_tasks, write_tasks
from .task import Task

__all__ = [
    "DataError",
    "DataFormat",
    "ReadReport",
    "Task",
    "convert",
    "detect_format",
    "iter_tasks",
    "read_tasks",
    "write_tasks",
]
