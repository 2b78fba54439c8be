"""Which retriever replicas answer: a background check of every replica's /health with a short
deadline, for the client's rotation (`RetrieverClient`).

A replica that is stopped or hung still accepts TCP connections (the kernel queues them), so
only an answer tells it is alive; the check asks every `interval_s` and gives each replica
`timeout_s`. A replica that misses it leaves the rotation and every request waiting on it is
abandoned (`unless_down`) to be retried on another; one that answers again is put back.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, List, Optional, TypeVar

import aiohttp

T = TypeVar("T")


class RetrieverError(RuntimeError):
    """A retriever request that failed (`status`: the HTTP status, when one came back); defined
    here, where the health check raises it too, and imported by the client's users from `client`."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status


class ReplicaHealth:
    def __init__(self, urls: List[str], http: Callable[[], aiohttp.ClientSession], interval_s: float, timeout_s: float):
        self.urls, self._http, self.interval_s, self.timeout_s = list(urls), http, interval_s, timeout_s
        self._down: Dict[str, asyncio.Event] = {}  # replica -> set while it is out of rotation
        self._task: Optional[asyncio.Task] = None

    def healthy(self) -> List[str]:
        return [u for u in self.urls if not self._event(u).is_set()]

    def _event(self, url: str) -> asyncio.Event:
        if url not in self._down:
            self._down[url] = asyncio.Event()
        return self._down[url]

    def ensure_started(self) -> None:
        """Run the check in the running loop (with more than one replica: one needs no choice)."""
        loop = asyncio.get_running_loop()
        if len(self.urls) > 1 and (self._task is None or self._task.done() or self._task.get_loop() is not loop):
            self._down = {}  # events belong to a loop: a new loop starts afresh
            self._task = loop.create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def check(self, url: str) -> Dict[str, Any]:
        """`url`'s /health answer, within `timeout_s`; a `RetrieverError` otherwise."""
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with self._http().get(url + "/health", timeout=timeout) as resp:
                if resp.status >= 400:
                    raise RetrieverError(f"{url}/health: HTTP {resp.status}: {await resp.text()}", resp.status)
                return await resp.json()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise RetrieverError(f"{url}/health: {type(e).__name__}: {e}") from None

    async def _run(self) -> None:
        async def one(url: str) -> None:
            try:
                await self.check(url)
                self._event(url).clear()
            except RetrieverError:
                self._event(url).set()

        while True:
            await asyncio.gather(*(one(u) for u in self.urls))
            await asyncio.sleep(self.interval_s)

    async def unless_down(self, url: str, call: Awaitable[T]) -> T:
        """`call`'s result, or a `RetrieverError` as soon as `url` leaves the rotation."""
        down = self._event(url)
        if self._task is None or down.is_set():
            return await call
        task = asyncio.ensure_future(call)
        waiter = asyncio.ensure_future(down.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        raise RetrieverError(f"{url}: left the rotation (no /health answer within {self.timeout_s:g} s)")
