"""Run a message's tool calls and render their `<tool_response>` blocks.

A failing call never ends the episode: a parse error, an unknown tool, bad
arguments, a timeout or a backend error becomes the response text, so the
model sees what went wrong and the rollout keeps going. The one exception is
`ToolUnavailable` (a replay without the call), which must not be papered over.
"""

from __future__ import annotations

import asyncio
import logging
from typing import List, Mapping

from .base import Tool, ToolError, ToolUnavailable
from .calls import ToolCall

log = logging.getLogger(__name__)


async def execute_call(call: ToolCall, tools: Mapping[str, Tool], timeout_s: float) -> str:
    if call.error:
        return f"Error: {call.error}."
    tool = tools.get(call.name or "")
    if tool is None:
        return f"Error: unknown tool {call.name!r}; available: {', '.join(sorted(tools))}."
    try:
        return await asyncio.wait_for(tool.call(call.arguments), timeout_s)
    except TimeoutError:
        return f"Error: the {call.name} call timed out after {timeout_s:g} s."
    except ToolError as e:
        return f"Error: {e}"
    except ToolUnavailable:
        raise  # the episode cannot go on as configured (see ToolUnavailable)
    except Exception as e:  # backend failures (HTTP, connection) must not kill the rollout
        log.warning("tool %s failed: %s: %s", call.name, type(e).__name__, e)
        return f"Error: the {call.name} call failed ({type(e).__name__})."


async def execute_calls(calls: List[ToolCall], tools: Mapping[str, Tool], timeout_s: float) -> List[str]:
    return list(await asyncio.gather(*(execute_call(c, tools, timeout_s) for c in calls)))


def render_tool_responses(calls: List[ToolCall], results: List[str]) -> str:
    """`<tool_response>{call}\\n{result}\\n</tool_response>\\n` per call, in order."""
    return "".join(f"<tool_response>{c.raw}\n{r}\n</tool_response>\n" for c, r in zip(calls, results))
