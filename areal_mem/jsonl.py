"""Reading jsonl files so that a bad line is reported as `file:line`, whoever reads it."""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Tuple, Type


def iter_jsonl(path: str, error: Type[Exception] = ValueError) -> Iterator[Tuple[str, Any]]:
    """(`path:line`, record) for every non-blank line; `error` for a missing file or bad JSON."""
    if not os.path.isfile(path):
        raise error(f"{path}: no such file")
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is reported like bad JSON
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise error(f"{path}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            except json.JSONDecodeError as e:
                raise error(f"{path}:{lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
            except RecursionError:
                raise error(f"{path}:{lineno}: not valid JSON (nested too deeply)") from None
            except ValueError as e:  # e.g. an integer of more than 4,300 digits (Python's limit)
                raise error(f"{path}:{lineno}: not valid JSON ({str(e)[:200]})") from None
            yield f"{path}:{lineno}", record
