"""The `Tool` plugin API: a name, a JSON schema for the prompt, and one async call returning text."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol

from areal_mem.config.rollout import RolloutConfig


class ToolError(Exception):
    """A call the tool refuses (bad arguments, backend failure); its message becomes the tool response."""


class Tool(ABC):
    name: str = ""
    schema: Dict[str, Any] = {}  # the function's JSON schema, as listed in a prompt

    @abstractmethod
    async def call(self, arguments: Dict[str, Any]) -> str:
        """Run one call with the model's `arguments` (JSON-decoded, unchecked) and return text."""


class SearchBackend(Protocol):
    """What the search tools need from a retrieval service; the composition injects the retriever's
    HTTP client (`retriever.client.RetrieverClient`), the rollout never imports it."""

    async def search(self, query: str, top_n: int) -> List[Dict[str, Any]]:
        """The `top_n` best documents for `query`, each at least {"id", "contents"}."""


@dataclass
class ToolBuild:
    """What a tool factory gets: the rollout settings, the retrieval client, its own options."""

    rollout: RolloutConfig
    retriever: Optional[SearchBackend] = None
    args: Dict[str, Any] = field(default_factory=dict)  # rollout.tool_args[<tool name>]
