"""Question files: FlashRAG jsonl and Search-R1 parquet readers, writers and the converter."""

from .errors import DataError
from .formats import DataFormat, read_tasks, write_tasks
from .task import Task

__all__ = ["DataError", "DataFormat", "Task", "read_tasks", "write_tasks"]
