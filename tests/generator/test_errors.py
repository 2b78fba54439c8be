"""The embedded server's one error middleware, on handlers that fail every way a route can:
a `RequestError` (SGLang's error shape, or a route's own body), aiohttp's own errors, an
unexpected exception before and after a stream started. No model: these are the middleware's
answers, whatever the route."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from areal_mem.rollout.generator.embedded.errors import BadRequest, ForbiddenPath, RequestError, json_errors
from areal_mem.rollout.generator.embedded.sse import EventStream


def _failing(exc: Exception):
    async def handler(request: web.Request) -> web.Response:
        raise exc

    return handler


async def _broken_stream(request: web.Request) -> web.StreamResponse:
    stream = EventStream(request)
    await stream.send({"text": "a"})
    raise RuntimeError("after the headers")


def _app() -> web.Application:
    app = web.Application(middlewares=[json_errors()])
    failures = {
        "/bad": BadRequest("a field is wrong"),
        "/too_large": BadRequest("too large", 413),
        "/forbidden": ForbiddenPath("outside"),
        "/engine": RequestError("the engine failed", 500),
        "/own_shape": RequestError("m", 400, {"success": False, "message": "m"}),
        "/bug": RuntimeError("boom"),
    }
    for path, exc in failures.items():
        app.router.add_post(path, _failing(exc))
    app.router.add_post("/stream", _broken_stream)
    app.router.add_get("/ok", _ok)
    return app


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def test_every_failure_is_a_json_answer_and_a_started_stream_is_cut():
    async def main():
        async with TestClient(TestServer(_app())) as client:
            got = {}
            for path in ("/bad", "/too_large", "/forbidden", "/engine", "/own_shape", "/bug", "/nope"):
                async with client.post(path) as r:
                    got[path] = (r.status, await r.json())
            async with client.get("/engine") as r:
                got["GET /engine"] = (r.status, await r.json())
            try:
                async with client.post("/stream") as r:
                    stream = (r.status, r.content_type, await r.read())
            except aiohttp.ClientPayloadError:  # the chunked body was cut: what a client sees
                stream = "cut"
            async with client.get("/ok") as r:
                after = (r.status, await r.json())
        return got, stream, after

    got, stream, after = asyncio.run(main())
    assert got["/bad"] == (400, {"error": {"message": "a field is wrong", "code": 400}})
    assert got["/too_large"] == (413, {"error": {"message": "too large", "code": 413}})
    assert got["/forbidden"] == (403, {"error": {"message": "outside", "code": 403}})
    assert got["/engine"] == (500, {"error": {"message": "the engine failed", "code": 500}})
    assert got["/own_shape"] == (400, {"success": False, "message": "m"})
    assert got["/bug"] == (500, {"error": {"message": "internal error: RuntimeError: boom", "code": 500}})
    assert got["/nope"] == (404, {"error": {"message": "POST /nope: Not Found", "code": 404}})
    assert got["GET /engine"] == (
        405,
        {"error": {"message": "GET /engine: Method Not Allowed (allowed: POST)", "code": 405}},
    )
    # no second answer written into a started stream: the event sent so far, then the cut
    assert stream == "cut" or (stream[0] == 200 and stream[2] == b'data: {"text": "a"}\n\n'), stream
    assert after == (200, {"ok": True})
