"""The retrieval HTTP service (aiohttp): MemSearcher's and Search-R1's routes over one index.

Every query, whichever route brought it, goes through one `MicroBatcher`, so hundreds of
agents searching at once share encoder forward passes and index calls instead of queueing
behind a global lock; with `retriever.cache_size` a bounded LRU `QueryCache` answers repeated
queries before they reach it. Bad requests get a 4xx JSON error naming the field; the service
stays up. /health names the index by its manifest checksum (what recorded tool calls cite).
"""

from __future__ import annotations

import json
import logging
import socket
from typing import Optional

from aiohttp import web

from areal_mem.config.retriever import RetrieverConfig
from areal_mem.http_guard import run_guarded
from areal_mem.process import write_ready_file
from areal_mem.security import bearer_auth_middleware, check_bind, json_errors_middleware

from .batcher import MicroBatcher
from .cache import QueryCache
from .index import Index
from .requests import Query, RequestError, parse_batch_search, parse_retrieve, parse_search

log = logging.getLogger(__name__)
BATCHER = web.AppKey("batcher", MicroBatcher)
CACHE = web.AppKey("cache", QueryCache)


def make_app(index: Index, cfg: RetrieverConfig) -> web.Application:
    app = web.Application(
        client_max_size=cfg.max_body_bytes,
        middlewares=[
            json_errors_middleware(lambda message, status: RequestError("", message, status).body()),
            bearer_auth_middleware(cfg.token),
        ],
    )

    async def batcher_ctx(app: web.Application):
        batcher = MicroBatcher(index.search, cfg.max_batch_size, cfg.batch_window_ms / 1000.0)
        batcher.start()
        app[BATCHER] = batcher
        if cfg.cache_size:
            app[CACHE] = QueryCache(cfg.cache_size, int(cfg.cache_mb * 2**20))
        yield
        await batcher.close()

    app.cleanup_ctx.append(batcher_ctx)

    async def answer(request: web.Request, parse) -> tuple[Query, list] | web.Response:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            err = RequestError("body", f"larger than the limit of {cfg.max_body_bytes} bytes", status=413)
            return web.json_response(err.body(), status=err.status)
        try:
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
                raise RequestError("body", f"not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None
            query = parse(body, cfg)
        except RequestError as e:
            return web.json_response(e.body(), status=e.status)
        try:
            batcher, cache = request.app[BATCHER], request.app.get(CACHE)
            if cache is None:
                hits = await batcher.submit_many(query.queries, query.top_n)
            else:
                hits = await cache.get_many(query.queries, query.top_n, batcher.submit)
        except Exception as e:  # the search failed: say so, keep serving
            log.exception("search failed")
            return web.json_response({"error": f"search failed: {type(e).__name__}: {e}", "field": ""}, status=500)
        return query, hits

    async def search(request: web.Request) -> web.Response:
        out = await answer(request, parse_search)
        if isinstance(out, web.Response):
            return out
        query, [hits] = out
        docs = [d for d, _ in hits]
        return web.json_response([docs, [s for _, s in hits]] if query.with_scores else docs)

    async def batch_search(request: web.Request) -> web.Response:
        out = await answer(request, parse_batch_search)
        if isinstance(out, web.Response):
            return out
        query, hits = out
        docs = [[d for d, _ in h] for h in hits]
        return web.json_response([docs, [[s for _, s in h] for h in hits]] if query.with_scores else docs)

    async def retrieve(request: web.Request) -> web.Response:
        out = await answer(request, parse_retrieve)
        if isinstance(out, web.Response):
            return out
        query, hits = out
        if query.with_scores:
            result = [[{"document": d, "score": s} for d, s in h] for h in hits]
        else:
            result = [[d for d, _ in h] for h in hits]
        return web.json_response({"result": result})

    async def health(request: web.Request) -> web.Response:
        b, cache = request.app[BATCHER], request.app.get(CACHE)
        return web.json_response(
            {
                "status": "ok",
                "kind": index.manifest.kind,
                "documents": index.count,
                "index_checksum": index.manifest.checksum(),
                "max_batch_size": b.max_batch,
                "batches": b.batches,
                "queries": b.queries,  # searched: cache hits never reach the batcher
                "cache": cache.stats() if cache is not None else None,
            }
        )

    app.router.add_post("/search", search)
    app.router.add_post("/batch_search", batch_search)
    app.router.add_post("/retrieve", retrieve)
    app.router.add_get("/health", health)
    return app


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(index: Index, cfg: RetrieverConfig, ready_file: Optional[str] = None) -> None:
    """Serve until SIGINT/SIGTERM. With `ready_file`, write the URL there once listening."""
    check_bind("retriever", cfg.host, cfg.token)
    sock = bind(cfg.host, cfg.port)
    url = url_of(sock, cfg.host)
    write_ready_file(ready_file or "", url)  # the socket already listens: early clients queue
    print(f"retriever: serving {index.manifest.kind} index of {index.count} documents at {url}", flush=True)
    # web.run_app with a header read timeout and a connection cap
    run_guarded(make_app(index, cfg), sock, cfg.http_read_timeout_s, cfg.max_connections)
