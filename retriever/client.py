"""The client the agents' search tool uses: pooled aiohttp, timeouts, bounded retries, rate limit.

Several URLs are replicas: requests go round-robin, and a retry moves on to the next replica.
Connection errors, timeouts and 5xx answers are retried with exponential backoff; a 4xx is the
caller's mistake and raises `RetrieverError` at once with the server's message.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import List, Optional, Sequence, Union

import aiohttp
from asyncio_throttle import Throttler

from areal_mem.config.retriever import RetrieverConfig
from areal_mem.http_session import PooledSession
from areal_mem.security import auth_headers

from .command import TOKEN_ENV


class RetrieverError(RuntimeError):
    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status


class RetrieverClient(PooledSession):
    def __init__(
        self,
        urls: Union[str, Sequence[str]],
        token: str = "",
        timeout_s: float = 30.0,
        max_retries: int = 3,
        rate_limit_per_s: float = 0.0,
        backoff_s: float = 0.2,
        max_connections: int = 256,
    ):
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("RetrieverClient needs at least one service URL")
        self.urls = [u.rstrip("/") for u in self.urls]
        # The launcher hands the shared token over the environment, never on a command line.
        super().__init__(auth_headers(token or os.environ.get(TOKEN_ENV, "")), timeout_s, max_connections)
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self._throttler = None
        if rate_limit_per_s > 0:
            n = max(1, round(rate_limit_per_s))
            self._throttler = Throttler(rate_limit=n, period=n / rate_limit_per_s)
        self._next_url = itertools.cycle(range(len(self.urls)))

    @classmethod
    def from_config(cls, cfg: RetrieverConfig, urls: Optional[Sequence[str]] = None) -> RetrieverClient:
        """From a `RetrieverConfig` (its `urls` unless `urls` is given)."""
        return cls(list(urls or cfg.urls), cfg.token, cfg.timeout_s, cfg.max_retries, cfg.rate_limit_per_s)

    async def _post(self, route: str, payload: dict):
        start = next(self._next_url)
        last: Exception = RetrieverError("no attempt made")
        for attempt in range(self.max_retries + 1):
            url = self.urls[(start + attempt) % len(self.urls)] + route
            if self._throttler is not None:
                await self._throttler.acquire()
            try:
                async with self._http().post(url, json=payload) as resp:
                    if resp.status < 400:
                        return await resp.json()
                    text = await resp.text()
                    if resp.status < 500:
                        raise RetrieverError(f"{url}: HTTP {resp.status}: {text}", resp.status)
                    last = RetrieverError(f"{url}: HTTP {resp.status}: {text}", resp.status)
            except (TimeoutError, aiohttp.ClientError) as e:
                last = RetrieverError(f"{url}: {type(e).__name__}: {e}")
            if attempt < self.max_retries:
                await asyncio.sleep(self.backoff_s * (2**attempt))
        raise RetrieverError(
            f"gave up after {self.max_retries + 1} attempts; last: {last}", getattr(last, "status", None)
        )

    async def index_checksum(self) -> str:
        """The checksum of the index the replicas serve (their /health), which recorded tool calls
        cite; replicas serving different indexes are refused, since answers would depend on which
        one a request reached."""
        found = {}
        for url in self.urls:
            try:
                async with self._http().get(url + "/health") as resp:
                    if resp.status >= 400:
                        raise RetrieverError(f"{url}/health: HTTP {resp.status}: {await resp.text()}", resp.status)
                    found[url] = (await resp.json()).get("index_checksum", "")
            except (TimeoutError, aiohttp.ClientError) as e:
                raise RetrieverError(f"{url}/health: {type(e).__name__}: {e}") from None
        if len(set(found.values())) > 1:
            raise RetrieverError(f"the retriever replicas serve different indexes: {found}")
        return found[self.urls[0]]

    async def search(self, query: str, top_n: int) -> List[dict]:
        """Top `top_n` documents `{"id", "contents"}` for one query (MemSearcher's /search)."""
        return await self._post("/search", {"query": query, "top_n": top_n})

    async def batch_search(self, queries: Sequence[str], top_n: int) -> List[List[dict]]:
        """One list of documents per query, in order (MemSearcher's /batch_search)."""
        return await self._post("/batch_search", {"query": list(queries), "top_n": top_n})
