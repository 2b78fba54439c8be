"""Idle, surplus and slow-reading connections, for every aiohttp service of the project (the
embedded generator, the retriever): no client address can take every connection slot, a
connection that sends nothing is closed soon, and a client that does not read its answers holds
a bounded number of answer bytes for a bounded time.

- Idle connections: aiohttp (3.x) has no timeout of its own for reading headers; its keep-alive
  timer, though, is armed when a connection is made and re-armed after every answer, and closes
  a connection that is waiting for (the rest of) a request when it fires. With
  `keepalive_timeout` set to `idle_timeout_s` (5 s by default, uvicorn's and so SGLang's
  keep-alive), a connection that sends nothing, trickles its headers (slowloris), or idles
  between requests is closed after it. Bodies are read by the routes under `read_timeout_s`.
- Connection slots: at most `max_connections` open, at most `max_connections_per_client` from
  one client address. A connection past either cap takes the slot of the oldest *idle*
  connection (no request in its handler) of the address holding the most (past the
  per-address cap: of its own address); when every one is busy, the new connection is closed
  before any byte of it is read. So a flood of idle sockets from one address evicts its own
  sockets, never another address's, and costs at most `max_connections` file descriptors.
- Answers: an answer must be taken by the client within `read_timeout_s`, else the connection is
  aborted (which frees its buffered bytes); answers not yet taken count against their address,
  and past `max_unsent_bytes_per_client` a new answer is replaced by a short 429 (one answer
  always goes through, so an honest client with one large answer is served).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, Optional, Set, Union

from aiohttp import web

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.config.retriever import RetrieverConfig

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 30.0  # a request's body (where the route reads it) and the taking of its answer
IDLE_TIMEOUT_S = 5.0  # before a request's headers are whole, and between requests
MAX_CONNECTIONS = 1024
MAX_CONNECTIONS_PER_CLIENT = 512
MAX_UNSENT_MB_PER_CLIENT = 64.0


@dataclass(frozen=True)
class GuardLimits:
    """The limits of one service (its config keys map onto these; see `docs/reliability_security.md`)."""

    read_timeout_s: float = READ_TIMEOUT_S
    idle_timeout_s: float = IDLE_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT
    max_unsent_bytes_per_client: int = int(MAX_UNSENT_MB_PER_CLIENT * 2**20)

    @classmethod
    def of(cls, cfg: Union[RetrieverConfig, EmbeddedConfig]) -> GuardLimits:
        """From a service's config section (`retriever`, `generator.embedded`): both name the
        limits `http_read_timeout_s`, `http_idle_timeout_s`, `max_connections`,
        `max_connections_per_client` and `max_unsent_mb_per_client`."""
        return cls(
            float(cfg.http_read_timeout_s),
            float(cfg.http_idle_timeout_s),
            int(cfg.max_connections),
            int(cfg.max_connections_per_client),
            int(cfg.max_unsent_mb_per_client * 2**20),
        )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ConnectionGuard:
    """The slot accounting of one `web.Server` (`attach` after the runner's `setup()`) and the
    middleware that marks connections busy and sends answers under the limits (`middleware`,
    placed first in the app's middlewares before `setup()`)."""

    def __init__(self, limits: GuardLimits):
        self.limits = limits
        self.peer: Dict[Any, str] = {}  # open connection (aiohttp RequestHandler) -> client address, oldest first
        self.per_peer: Counter[str] = Counter()
        self.busy: Set[Any] = set()  # connections whose request is in a handler
        self.unsent: Counter[str] = Counter()  # answer bytes not yet taken, per client address
        self.evicted = self.refused = self.aborted = 0

    def stats(self) -> Dict[str, int]:
        """What a service's /health may report: connections open, closed to make room (evicted
        idle ones, refused new ones), aborted for an answer not taken, answer bytes not taken."""
        return {
            "open": len(self.peer),
            "evicted": self.evicted,
            "refused": self.refused,
            "aborted": self.aborted,
            "unsent_bytes": sum(self.unsent.values()),
        }

    def attach(self, server: web.Server) -> None:
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler, transport) -> None:
            made(handler, transport)
            self._admit(handler, transport)

        def connection_lost(handler, exc=None) -> None:
            lost(handler, exc)
            self._forget(handler)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def _admit(self, handler, transport) -> None:
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, (tuple, list)) and peername else "?"
        self.peer[handler] = peer
        self.per_peer[peer] += 1
        lim = self.limits
        if self.per_peer[peer] > lim.max_connections_per_client:
            self._make_room(
                handler, peer, f"{peer} holds {lim.max_connections_per_client} (max_connections_per_client)"
            )
        elif len(self.peer) > lim.max_connections:
            top = max(self.per_peer, key=lambda p: self.per_peer[p])
            self._make_room(handler, top, f"{len(self.peer) - 1} open (max_connections)")

    def _make_room(self, new, peer: str, why: str) -> None:
        """Close the oldest idle connection of `peer` (not `new`), or else `new` itself."""
        victim = next((h for h, p in self.peer.items() if p == peer and h is not new and h not in self.busy), None)
        if victim is None:
            self.refused += 1
            count = self.refused
        else:
            self.evicted += 1
            count = self.evicted
        if count == 1 or count % 1000 == 0:
            what = "closing new connections" if victim is None else "closing idle ones"
            log.warning("%s: %s (%d evicted, %d refused so far)", why, what, self.evicted, self.refused)
        self._close(victim if victim is not None else new)

    def _close(self, handler) -> None:
        self._forget(handler)
        handler.force_close()

    def _forget(self, handler) -> None:
        peer = self.peer.pop(handler, None)
        self.busy.discard(handler)
        if peer is not None:
            self.per_peer[peer] -= 1
            if self.per_peer[peer] <= 0:
                del self.per_peer[peer]

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        conn = request.protocol
        peer = self.peer.get(conn, "?")
        if self.unsent[peer] >= self.limits.max_unsent_bytes_per_client:
            return self._too_many_unsent(peer)  # before any work
        self.busy.add(conn)
        try:
            resp = await handler(request)
        finally:
            self.busy.discard(conn)
        if isinstance(resp, web.Response) and not resp.prepared and isinstance(resp.body, (bytes, bytearray)):
            return await self._send(request, resp, peer, len(resp.body))
        return resp

    def _too_many_unsent(self, peer: str) -> web.Response:
        mb = self.limits.max_unsent_bytes_per_client / 2**20
        msg = f"{self.unsent[peer]} answer bytes of this client not taken yet; at most {mb:g} MiB (max_unsent_mb_per_client)"
        return web.json_response({"error": msg, "field": ""}, status=429)

    async def _send(self, request: web.Request, resp: web.Response, peer: str, size: int) -> web.StreamResponse:
        """Send `resp` now, within the read timeout, counting its bytes against its address."""
        lim = self.limits
        held = self.unsent[peer]
        if held and held + size > lim.max_unsent_bytes_per_client:
            return self._too_many_unsent(peer)
        self.unsent[peer] += size
        try:
            await asyncio.wait_for(_write(request, resp), lim.read_timeout_s)
        except TimeoutError:
            self.aborted += 1
            log.warning(
                "%s did not take a %d-byte answer within %g s: connection aborted", peer, size, lim.read_timeout_s
            )
            if request.transport is not None:
                request.transport.abort()  # drops the buffered answer
        finally:
            self.unsent[peer] -= size
            if self.unsent[peer] <= 0:
                del self.unsent[peer]
        return resp


GUARD = web.AppKey("connection_guard", ConnectionGuard)


async def _write(request: web.Request, resp: web.Response) -> None:
    await resp.prepare(request)
    await resp.write_eof()  # returns once the transport's buffer is below its high-water mark


async def start_guarded(
    app: web.Application,
    *,
    host: str = "",
    port: int = 0,
    sock: Optional[socket.socket] = None,
    limits: GuardLimits = GuardLimits(),
    **runner_options: Any,
) -> web.AppRunner:
    """Serve `app` on `sock` (or host:port) under `limits`; the caller cleans the returned runner up."""
    guard = ConnectionGuard(limits)
    app[GUARD] = guard  # routes may report `guard.stats()`
    app.middlewares.insert(0, guard.middleware)
    runner = web.AppRunner(app, **{**runner_options, "keepalive_timeout": limits.idle_timeout_s})
    await runner.setup()
    assert runner.server is not None
    guard.attach(runner.server)
    site = web.SockSite(runner, sock) if sock is not None else web.TCPSite(runner, host, port)
    await site.start()
    return runner


def run_guarded(app: web.Application, sock: socket.socket, limits: GuardLimits) -> None:
    """`web.run_app(app, sock=sock)` with the guards: serves until SIGTERM or SIGINT."""

    async def main() -> None:
        runner = await start_guarded(app, sock=sock, limits=limits, access_log=None, handle_signals=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except (web.GracefulExit, KeyboardInterrupt):
        pass
