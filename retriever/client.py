"""The client the agents' search tool uses: pooled aiohttp, timeouts, bounded retries, rate limit.

Several URLs are replicas: requests go round-robin, and a retry moves on to the next replica.
Connection errors, timeouts and 5xx answers are retried with exponential backoff; a 4xx is the
caller's mistake and raises `RetrieverError` at once with the server's message.

With several replicas, a health check (`ReplicaHealth`) asks each replica's /health every
`health_interval_s` with a short deadline (`health_timeout_s`): a replica that stops answering
(hung, stopped, its host gone) leaves the rotation, and the requests waiting on it move on to
another replica at once instead of waiting their whole `timeout_s`; it comes back when it answers.
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
from .health import ReplicaHealth, RetrieverError

__all__ = ["RetrieverClient", "RetrieverError"]


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
        health_interval_s: float = 1.0,
        health_timeout_s: float = 2.0,
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
        self.health = ReplicaHealth(self.urls, self._http, health_interval_s, health_timeout_s)

    @classmethod
    def from_config(cls, cfg: RetrieverConfig, urls: Optional[Sequence[str]] = None) -> RetrieverClient:
        """From a `RetrieverConfig` (its `urls` unless `urls` is given)."""
        return cls(
            list(urls or cfg.urls),
            cfg.token,
            cfg.timeout_s,
            cfg.max_retries,
            cfg.rate_limit_per_s,
            health_interval_s=cfg.health_interval_s,
            health_timeout_s=cfg.health_timeout_s,
        )

    async def close(self) -> None:
        await self.health.stop()
        await super().close()

    def _pick(self, attempt: int, start: int) -> str:
        """The replica of this attempt: round-robin over the healthy ones (all, if none is)."""
        healthy = self.health.healthy() or self.urls
        return healthy[(start + attempt) % len(healthy)]

    async def _post(self, route: str, payload: dict):
        start = next(self._next_url)
        self.health.ensure_started()
        last: Exception = RetrieverError("no attempt made")
        for attempt in range(self.max_retries + 1):
            replica = self._pick(attempt, start)
            url = replica + route
            if self._throttler is not None:
                await self._throttler.acquire()
            try:
                return await self.health.unless_down(replica, self._post_once(url, payload))
            except RetrieverError as e:
                if e.status is not None and e.status < 500:
                    raise
                last = e
            except (TimeoutError, aiohttp.ClientError) as e:
                last = RetrieverError(f"{url}: {type(e).__name__}: {e}")
            if attempt < self.max_retries:
                await asyncio.sleep(self.backoff_s * (2**attempt))
        raise RetrieverError(
            f"gave up after {self.max_retries + 1} attempts; last: {last}", getattr(last, "status", None)
        )

    async def _post_once(self, url: str, payload: dict):
        async with self._http().post(url, json=payload) as resp:
            if resp.status < 400:
                return await resp.json()
            raise RetrieverError(f"{url}: HTTP {resp.status}: {await resp.text()}", resp.status)

    async def index_checksum(self) -> str:
        """The checksum of the index the replicas serve (their /health), which recorded tool calls
        cite: answered by every replica that answers within `health_timeout_s` (one is enough);
        replicas serving different indexes are refused, since answers would depend on which one
        a request reached."""
        answers = await asyncio.gather(*(self.health.check(u) for u in self.urls), return_exceptions=True)
        found, errors = {}, []
        for url, answer in zip(self.urls, answers):
            if isinstance(answer, RetrieverError) and answer.status is not None and answer.status < 500:
                raise answer  # a 4xx (a wrong token) is the caller's to fix, whichever replica said it
            if isinstance(answer, BaseException):
                if not isinstance(answer, RetrieverError):
                    raise answer
                errors.append(str(answer))
            else:
                found[url] = answer.get("index_checksum", "")
        if not found:
            raise RetrieverError(f"no retriever replica answered /health: {'; '.join(errors)}")
        if len(set(found.values())) > 1:
            raise RetrieverError(f"the retriever replicas serve different indexes: {found}")
        return next(iter(found.values()))

    async def search(self, query: str, top_n: int) -> List[dict]:
        """Top `top_n` documents `{"id", "contents"}` for one query (MemSearcher's /search)."""
        return await self._post("/search", {"query": query, "top_n": top_n})

    async def batch_search(self, queries: Sequence[str], top_n: int) -> List[List[dict]]:
        """One list of documents per query, in order (MemSearcher's /batch_search)."""
        return await self._post("/batch_search", {"query": list(queries), "top_n": top_n})
