"""Writers write to `OUT.tmp` and rename it over OUT only when every row went through, so a
conversion refused at row 150 000 leaves no half-written file behind."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    os.replace(tmp, path)
