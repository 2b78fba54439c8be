"""A real HTTP proxy in front of a real generator, for tests of what a client sends and of a
generator that gives out mid-way."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Optional

import aiohttp
from aiohttp import web


class GeneratorProxy:
    """Forwards every request to `target` and keeps the /generate bodies it saw; with
    `fail_after`, every /generate after that many answers 503, as a generator that died behind
    a load balancer."""

    def __init__(self, target: str, fail_after: Optional[int] = None) -> None:
        self.target, self.fail_after, self.bodies, self.url = target, fail_after, [], ""
        self._ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        assert self._ready.wait(10)

    def _serve(self) -> None:
        async def forward(request: web.Request) -> web.Response:
            body = await request.read()
            if request.path == "/generate":
                if self.fail_after is not None and len(self.bodies) >= self.fail_after:
                    return web.Response(status=503, text="generator gone")
                self.bodies.append(json.loads(body))
            async with aiohttp.ClientSession() as s:
                async with s.request(request.method, self.target + request.path, data=body) as r:
                    return web.Response(body=await r.read(), status=r.status, content_type=r.content_type)

        async def main_() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", forward)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
            self._ready.set()
            await asyncio.Event().wait()

        asyncio.run(main_())
