"""Request bodies of the two API families, validated into typed messages.

MemSearcher: `/search {"query", "top_n"=10, "return_score"=false}`, `/batch_search` with a list
in `"query"`. Search-R1 / ASearcher: `/retrieve {"queries", "topk"=3, "return_scores"=false}`.
The defaults are those of the released servers. Every rejection names the field at fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

from areal_mem.config.retriever import RetrieverConfig

MEMSEARCHER_DEFAULT_TOP_N = 10
SEARCH_R1_DEFAULT_TOPK = 3


class SearchRequestError(ValueError):
    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.message, self.status = field, message, status

    def body(self) -> dict:
        return {"error": str(self), "field": self.field}


@dataclass(frozen=True)
class Query:
    queries: List[str]
    top_n: int
    with_scores: bool


def _object(body: Any, allowed: tuple) -> dict:
    if not isinstance(body, dict):
        raise SearchRequestError("", f"the body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise SearchRequestError(unknown[0], f"unknown field; allowed: {', '.join(allowed)}")
    return body


def _text(value: Any, field: str, cfg: RetrieverConfig) -> str:
    if not isinstance(value, str):
        raise SearchRequestError(field, f"must be a string, got {type(value).__name__}")
    if len(value) > cfg.max_query_chars:  # a search's cost grows with its terms; one thread serves all
        raise SearchRequestError(
            field, f"is {len(value)} characters long, at most {cfg.max_query_chars} (retriever.max_query_chars)"
        )
    if not value.strip():
        raise SearchRequestError(field, "must not be empty")
    try:
        value.encode("utf-8")  # JSON may carry lone surrogates ("\ud800") that no encoder takes
    except UnicodeEncodeError as e:
        raise SearchRequestError(field, f"is not valid Unicode text ({e.reason} at {e.start})") from None
    return value


def _texts(value: Any, field: str, cfg: RetrieverConfig) -> List[str]:
    if not isinstance(value, list):
        raise SearchRequestError(field, f"must be a list of strings, got {type(value).__name__}")
    if not value:
        raise SearchRequestError(field, "must hold at least one query")
    if len(value) > cfg.max_queries:
        raise SearchRequestError(field, f"holds {len(value)} queries, at most {cfg.max_queries} are allowed")
    return [_text(v, f"{field}[{i}]", cfg) for i, v in enumerate(value)]


def _count(value: Any, field: str, cfg: RetrieverConfig) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SearchRequestError(field, f"must be an integer, got {type(value).__name__}")
    if not 1 <= value <= cfg.max_top_n:
        raise SearchRequestError(field, f"must be in 1..{cfg.max_top_n}, got {value}")
    return value


def _flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise SearchRequestError(field, f"must be true or false, got {type(value).__name__}")
    return value


def _memsearcher(body: Any, cfg: RetrieverConfig, batch: bool) -> Query:
    """MemSearcher's /search (`query`: one string) and /batch_search (`query`: a list of them)."""
    b = _object(body, ("query", "top_n", "return_score"))
    if "query" not in b:
        raise SearchRequestError("query", "is required")
    return Query(
        _texts(b["query"], "query", cfg) if batch else [_text(b["query"], "query", cfg)],
        _count(b.get("top_n", MEMSEARCHER_DEFAULT_TOP_N), "top_n", cfg),
        _flag(b.get("return_score", False), "return_score"),
    )


def parse_search(body: Any, cfg: RetrieverConfig) -> Query:
    return _memsearcher(body, cfg, batch=False)


def parse_batch_search(body: Any, cfg: RetrieverConfig) -> Query:
    return _memsearcher(body, cfg, batch=True)


def parse_retrieve(body: Any, cfg: RetrieverConfig) -> Query:
    b = _object(body, ("queries", "topk", "return_scores"))
    if "queries" not in b:
        raise SearchRequestError("queries", "is required")
    topk = b.get("topk")
    return Query(
        _texts(b["queries"], "queries", cfg),
        _count(SEARCH_R1_DEFAULT_TOPK if topk is None else topk, "topk", cfg),
        _flag(b.get("return_scores", False), "return_scores"),
    )
