"""Reading jsonl files so that a bad line is reported as `file:line`, whoever reads it."""
from __future__ import annotations

import json
import os
from typing import Any, Iterator, Tuple, Type


def iter_jsonl(path: str, error: Type[Exception] = ValueError) -> Iterator[Tuple[str, Any]]:
    """(`path:line`, record) for every non-blank line; `error` for a missing file or bad JSON."""
    if not os.path.isfile(path):
        raise error(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{lineno}", json.loads(line)
            except json.JSONDecodeError as e:
                raise error(f"{path}:{lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
