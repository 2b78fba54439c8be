"""Slow and surplus connections, for every aiohttp service of the project (the embedded generator,
the retriever): a client must send a request's headers within a read timeout, and the service
keeps at most a fixed number of connections open.

aiohttp (3.x) has no timeout of its own for reading headers; its keep-alive timer, though, is
armed when a connection is made and re-armed after every answer, and closes a connection that
is waiting for (the rest of) a request when it fires: with `keepalive_timeout` set to the read
timeout, a client that trickles its headers (slowloris), or opens a connection and sends
nothing, is closed after it. Bodies are read by the routes themselves under the same timeout
(the generator's `RequestValidator.json`). The connection cap closes a connection at once when
it would take the service past `max_connections`, before any byte of it is read, so a flood of
idle sockets costs at most that many file descriptors.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, Callable, Optional

from aiohttp import web

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 30.0  # headers of a request (and, where the route reads it, its body)
MAX_CONNECTIONS = 1024


def runner_kwargs(read_timeout_s: float = READ_TIMEOUT_S) -> dict:
    """`web.AppRunner` keyword arguments: idle connections and partial headers close after the
    read timeout (aiohttp's default keep-alive is an hour)."""
    return {"keepalive_timeout": read_timeout_s}


def cap_connections(server: web.Server, max_connections: int = MAX_CONNECTIONS) -> None:
    """Close every new connection of `server` (a runner's, after `setup()`) that would be one more
    than `max_connections`; the ones open go on unaffected."""
    made: Callable[..., Any] = server.connection_made
    refused = [0]

    def connection_made(handler, transport) -> None:
        made(handler, transport)
        if len(server.connections) > max_connections:
            refused[0] += 1
            if refused[0] == 1 or refused[0] % 1000 == 0:
                log.warning(
                    "%d connections open: closing new ones (max_connections %d)", max_connections, max_connections
                )
            handler.force_close()

    server.connection_made = connection_made  # type: ignore[method-assign]


async def start_guarded(
    app: web.Application,
    *,
    host: str = "",
    port: int = 0,
    sock: Optional[socket.socket] = None,
    read_timeout_s: float = READ_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
    **runner_options: Any,
) -> web.AppRunner:
    """Serve `app` on `sock` (or host:port) with the read timeout and the connection cap; the
    caller cleans the returned runner up."""
    runner = web.AppRunner(app, **{**runner_options, **runner_kwargs(read_timeout_s)})
    await runner.setup()
    assert runner.server is not None
    cap_connections(runner.server, max_connections)
    site = web.SockSite(runner, sock) if sock is not None else web.TCPSite(runner, host, port)
    await site.start()
    return runner


def run_guarded(
    app: web.Application,
    sock: socket.socket,
    read_timeout_s: float = READ_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> None:
    """`web.run_app(app, sock=sock)` with the guards: serves until SIGTERM or SIGINT."""

    async def main() -> None:
        runner = await start_guarded(
            app,
            sock=sock,
            read_timeout_s=read_timeout_s,
            max_connections=max_connections,
            access_log=None,
            handle_signals=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except (web.GracefulExit, KeyboardInterrupt):
        pass
