"""The `wikipedia_search` tool over the retrieval service, as MemSearcher's prompt declares it.

Quirks of the released code, chosen deliberately:
- `top_n` defaults to the schema's 5 (what the prompt tells the model), not the
  released server's 10; `rollout.top_n` changes it, `rollout.max_top_n` caps it.
- documents are joined with `rollout.doc_separator`, a real newline by default;
  the released code's literal backslash-n pair is `doc_separator: "\\\\n"`.
"""

from __future__ import annotations

from typing import Any, Dict

from .base import SearchBackend, Tool, ToolBuild, ToolError

SCHEMA: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "wikipedia_search",
        "description": "Search Wikipedia for a given query.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Query to search for."},
                "top_n": {
                    "type": "integer",
                    "description": "Number of results to return. The default value is 5.",
                    "default": 5,
                },
            },
            "required": ["query"],
        },
    },
}


class WikipediaSearchTool(Tool):
    name = "wikipedia_search"
    schema = SCHEMA

    def __init__(
        self, retriever: SearchBackend, default_top_n: int = 5, max_top_n: int = 20, separator: str = "\n"
    ) -> None:
        self.retriever = retriever
        self.default_top_n = default_top_n
        self.max_top_n = max_top_n
        self.separator = separator

    async def call(self, arguments: Dict[str, Any]) -> str:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError('"query" must be a non-empty string.')
        top_n = arguments.get("top_n", self.default_top_n)
        if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
            raise ToolError('"top_n" must be a positive integer.')
        docs = await self.retriever.search(query.strip(), min(top_n, self.max_top_n))
        if not docs:
            return "No results."
        return self.separator.join(str(d["contents"]) for d in docs)


def from_build(build: ToolBuild) -> WikipediaSearchTool:
    if build.retriever is None:
        raise ValueError("the wikipedia_search tool needs a retriever (retriever.urls, or let the command start one)")
    r = build.rollout
    return WikipediaSearchTool(build.retriever, default_top_n=r.top_n, max_top_n=r.max_top_n, separator=r.doc_separator)
