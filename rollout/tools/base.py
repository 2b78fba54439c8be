"""The `Tool` plugin API: a name, a JSON schema for the prompt, and one async call returning text."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, Optional


class ToolError(Exception):
    """A call the tool refuses (bad arguments, backend failure); its message becomes the tool response."""


class Tool(ABC):
    name: str = ""
    schema: Dict[str, Any] = {}  # the function's JSON schema, as listed in a prompt

    @abstractmethod
    async def call(self, arguments: Dict[str, Any]) -> str:
        """Run one call with the model's `arguments` (JSON-decoded, unchecked) and return text."""


@dataclass
class ToolBuild:
    """What a tool factory gets: the rollout settings, the retrieval client, its own options."""

    rollout: Any  # RolloutConfig (a DictConfig or the dataclass)
    retriever: Optional[Any] = None  # an object with `async search(query, top_n) -> [{"id","contents"}]`
    args: Dict[str, Any] = field(default_factory=dict)  # rollout.tool_args[<tool name>]
