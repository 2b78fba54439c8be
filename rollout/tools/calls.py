"""Find and parse `<tool_call>{json}</tool_call>` blocks in model output.

Tool calls are JSON only: `json.loads`, never `eval`. A block that is not a JSON
object with a string `name` and an object `arguments` is kept with an `error`
so the workflow can answer it with an error message instead of failing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


@dataclass
class ToolCall:
    raw: str  # the block's text between the tags, stripped
    name: Optional[str] = None
    arguments: Dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None  # why the block is not a usable call


def tags_balanced(text: str, open_tag: str, close_tag: str) -> bool:
    """Every open tag is closed before the next opens, and nothing closes what never opened."""
    depth = 0
    pattern = re.compile(re.escape(open_tag) + "|" + re.escape(close_tag))
    for m in pattern.finditer(text):
        depth += 1 if m.group(0) == open_tag else -1
        if depth not in (0, 1):
            return False
    return depth == 0


def parse_tool_call(raw: str) -> ToolCall:
    raw = raw.strip()
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as e:
        return ToolCall(raw=raw, error=f"the tool call is not valid JSON ({e.msg} at char {e.pos})")
    if not isinstance(obj, dict):
        return ToolCall(raw=raw, error="the tool call must be a JSON object")
    name, arguments = obj.get("name"), obj.get("arguments")
    if not isinstance(name, str) or not name:
        return ToolCall(raw=raw, error='the tool call lacks a string "name"')
    if not isinstance(arguments, dict):
        return ToolCall(raw=raw, name=name, error='the tool call lacks an "arguments" object')
    return ToolCall(raw=raw, name=name, arguments=arguments)


def find_tool_calls(text: str) -> List[ToolCall]:
    """Every block in order; empty when there is none or the tags do not balance."""
    if not tags_balanced(text, OPEN, CLOSE):
        return []
    return [parse_tool_call(m.group(1)) for m in _BLOCK.finditer(text)]
