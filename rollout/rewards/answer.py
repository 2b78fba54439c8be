"""Read the answer out of a final message: the last brace-matched `\\boxed{...}`."""

from __future__ import annotations

from typing import Optional

_BOXED = "\\boxed{"


def _closing(text: str, start: int) -> Optional[int]:
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def extract_boxed(text: str) -> Optional[str]:
    """Content of the last `\\boxed{...}` whose braces close; None when there is none."""
    pos = text.rfind(_BOXED)
    while pos != -1:
        start = pos + len(_BOXED)
        end = _closing(text, start)
        if end is not None:
            return text[start:end].strip()
        pos = text.rfind(_BOXED, 0, pos)
    return None
