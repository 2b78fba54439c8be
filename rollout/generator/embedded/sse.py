"""Server-sent events, as SGLang's and OpenAI's streams send them: `data: {json}` events, then
`data: [DONE]`. The headers go with the first event, so a request refused before any token
still gets an ordinary error answer."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .protocol import dumps


class EventStream:
    def __init__(self, request: web.Request):
        self.request = request
        self.response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})

    async def start(self) -> None:
        """Send the headers (once), before the first event."""
        if not self.response.prepared:
            await self.response.prepare(self.request)

    async def send(self, event: Any) -> None:
        await self.start()
        await self.response.write(b"data: " + dumps(event).encode() + b"\n\n")

    async def end(self) -> web.StreamResponse:
        await self.start()
        await self.response.write(b"data: [DONE]\n\n")
        await self.response.write_eof()
        return self.response
