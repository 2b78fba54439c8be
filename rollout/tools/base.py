"""The `Tool` plugin API: a name, a JSON schema for the prompt, and one async call returning text."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol

from areal_mem.config.rollout import RolloutConfig

# The trajectory id of the episode running in this task (set by `run_episode`); tool calls run in
# child tasks that inherit it, so a recorded search names the episode that asked without every
# tool and backend signature carrying it.
EPISODE: ContextVar[str] = ContextVar("episode", default="")


class ToolError(Exception):
    """A call the tool refuses (bad arguments, backend failure); its message becomes the tool response."""


class ToolUnavailable(Exception):
    """The tool cannot answer as configured (a replay that lacks the call). It stops the episode
    instead of becoming a response: any made-up response would silently change the episode."""


class Tool(ABC):
    name: str = ""
    schema: Dict[str, Any] = {}  # the function's JSON schema, as listed in a prompt

    @abstractmethod
    async def call(self, arguments: Dict[str, Any]) -> str:
        """Run one call with the model's `arguments` (JSON-decoded, unchecked) and return text."""


class SearchBackend(Protocol):
    """What the search tools need from a retrieval service; the composition injects the retriever's
    HTTP client (`areal_mem.retriever.client.RetrieverClient`), the rollout never imports it."""

    async def search(self, query: str, top_n: int) -> List[Dict[str, Any]]:
        """The `top_n` best documents for `query`, each at least {"id", "contents"}."""


class ClosableBackend(SearchBackend, Protocol):
    """A backend the process that made it closes when done (the retriever's client, a tape)."""

    async def close(self) -> None: ...


class WrappedBackend:
    """A backend around another (recording, replay): closing it closes the one inside."""

    def __init__(self, inner: Optional[SearchBackend]) -> None:
        self.inner = inner

    async def close(self) -> None:
        close = getattr(self.inner, "close", None)  # the retriever client has one; plugin backends may not
        if close is not None:
            await close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


@dataclass
class ToolBuild:
    """What a tool factory gets: the rollout settings, the retrieval client, its own options."""

    rollout: RolloutConfig
    retriever: Optional[SearchBackend] = None
    args: Dict[str, Any] = field(default_factory=dict)  # rollout.tool_args[<tool name>]
