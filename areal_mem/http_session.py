"""The pooled aiohttp session that every HTTP client of a service keeps (retriever, generators)."""

from __future__ import annotations

from typing import Dict, Optional

import aiohttp

KEEPALIVE_S = 4.0  # below the services' default http_idle_timeout_s (areal_mem/http_guard.py)


class PooledSession:
    """One connection pool per client, opened on first use (inside the loop that uses it, as aiohttp
    requires) and reopened if closed; `close()` or `async with` closes it."""

    def __init__(self, headers: Dict[str, str], timeout_s: float, max_connections: int = 0) -> None:
        self._headers, self._timeout_s, self._max_connections = headers, timeout_s, max_connections
        self._session: Optional[aiohttp.ClientSession] = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                # 0: no limit. Idle pooled connections close before the services' own idle timeout
                # (http_idle_timeout_s, 5 s) would close them under a request about to be sent
                connector=aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=KEEPALIVE_S),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
