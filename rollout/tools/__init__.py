"""Tools a workflow can call: the plugin API, call parsing and the wikipedia_search tool."""

from .base import Tool, ToolBuild, ToolError
from .calls import ToolCall, find_tool_calls

__all__ = ["Tool", "ToolBuild", "ToolCall", "ToolError", "find_tool_calls"]
