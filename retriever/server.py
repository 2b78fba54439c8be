"""The retrieval HTTP service (aiohttp): MemSearcher's and Search-R1's routes over one index.

Every query, whichever route brought it, goes through one `MicroBatcher`, so hundreds of
agents searching at once share encoder forward passes and index calls instead of queueing
behind a global lock; with `retriever.cache_size` a bounded LRU `QueryCache` answers repeated
queries before they reach it. Bad requests get a 4xx JSON error naming the field; the service
stays up. /health names the index by its manifest checksum (what recorded tool calls cite).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any, Callable, List, Optional, Tuple, Union

from aiohttp import web

from areal_mem.config.retriever import BatchOrder, RetrieverConfig
from areal_mem.http_guard import GUARD, GuardLimits, run_guarded
from areal_mem.process import write_ready_file
from areal_mem.security import bearer_auth_middleware, check_bind, json_errors_middleware

from .batcher import MicroBatcher
from .cache import QueryCache
from .index import Index
from .requests import Query, SearchRequestError, parse_batch_search, parse_retrieve, parse_search

log = logging.getLogger(__name__)
BATCHER = web.AppKey("batcher", MicroBatcher)
CACHE = web.AppKey("cache", QueryCache)
Parser = Callable[[Any, RetrieverConfig], Query]


class RetrieverRoutes:
    """The service's routes as named handlers over one index: each search route parses its body
    (`requests`), searches through the app's batcher (and cache), and writes its API's shape."""

    def __init__(self, index: Index, cfg: RetrieverConfig):
        self.index, self.cfg = index, cfg

    def routes(self) -> List[web.RouteDef]:
        return [
            web.post("/search", self.search),
            web.post("/batch_search", self.batch_search),
            web.post("/retrieve", self.retrieve),
            web.get("/health", self.health),
        ]

    async def batcher_ctx(self, app: web.Application):
        """The batcher (and cache) of the app's lifetime, started inside its event loop."""
        cfg = self.cfg
        round_robin = cfg.batch_order == BatchOrder.round_robin
        window = cfg.batch_window_ms / 1000.0
        batcher = MicroBatcher(self.index.search, cfg.max_batch_size, window, round_robin, cfg.max_batch_chars)
        batcher.start()
        app[BATCHER] = batcher
        if cfg.cache_size:
            app[CACHE] = QueryCache(cfg.cache_size, int(cfg.cache_mb * 2**20))
        yield
        await batcher.close()

    async def _body(self, request: web.Request) -> Any:
        """The request's JSON body, read within `http_read_timeout_s` and under `max_body_bytes`."""
        cfg = self.cfg
        try:
            raw = await asyncio.wait_for(request.read(), cfg.http_read_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            raise SearchRequestError("body", f"larger than the limit of {cfg.max_body_bytes} bytes", 413) from None
        except TimeoutError:
            msg = f"not received within {cfg.http_read_timeout_s:g} s (retriever.http_read_timeout_s)"
            raise SearchRequestError("body", msg, 408) from None
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise SearchRequestError("body", f"not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None

    async def _answer(self, request: web.Request, parse: Parser) -> Union[Tuple[Query, list], web.Response]:
        """The parsed query and its hits (one list per query), or the error answer to send."""
        try:
            query = parse(await self._body(request), self.cfg)
        except SearchRequestError as e:
            return web.json_response(e.body(), status=e.status)
        try:
            batcher, cache = request.app[BATCHER], request.app.get(CACHE)
            if cache is None:
                hits = await batcher.submit_many(query.queries, query.top_n)
            else:
                hits = await cache.get_many(query.queries, query.top_n, batcher.request())
        except Exception as e:  # the search failed: say so, keep serving
            log.exception("search failed")
            return web.json_response({"error": f"search failed: {type(e).__name__}: {e}", "field": ""}, status=500)
        return query, hits

    async def search(self, request: web.Request) -> web.Response:
        """MemSearcher's /search: one query's documents (and scores)."""
        out = await self._answer(request, parse_search)
        if isinstance(out, web.Response):
            return out
        query, [hits] = out
        docs = [d for d, _ in hits]
        return web.json_response([docs, [s for _, s in hits]] if query.with_scores else docs)

    async def batch_search(self, request: web.Request) -> web.Response:
        """MemSearcher's /batch_search: one list of documents per query."""
        out = await self._answer(request, parse_batch_search)
        if isinstance(out, web.Response):
            return out
        query, hits = out
        docs = [[d for d, _ in h] for h in hits]
        return web.json_response([docs, [[s for _, s in h] for h in hits]] if query.with_scores else docs)

    async def retrieve(self, request: web.Request) -> web.Response:
        """Search-R1's /retrieve: `{"result": [...]}`, documents or `{document, score}` pairs."""
        out = await self._answer(request, parse_retrieve)
        if isinstance(out, web.Response):
            return out
        query, hits = out
        if query.with_scores:
            result = [[{"document": d, "score": s} for d, s in h] for h in hits]
        else:
            result = [[d for d, _ in h] for h in hits]
        return web.json_response({"result": result})

    async def health(self, request: web.Request) -> web.Response:
        b, cache, guard = request.app[BATCHER], request.app.get(CACHE), request.app.get(GUARD)
        index = self.index
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
                "connections": guard.stats() if guard is not None else None,
            }
        )


def make_app(index: Index, cfg: RetrieverConfig) -> web.Application:
    """The app: the routes behind the JSON-error middleware and then the bearer-token check."""
    app = web.Application(
        client_max_size=cfg.max_body_bytes,
        middlewares=[
            json_errors_middleware(lambda message, status: SearchRequestError("", message, status).body()),
            bearer_auth_middleware(cfg.token),
        ],
    )
    routes = RetrieverRoutes(index, cfg)
    app.cleanup_ctx.append(routes.batcher_ctx)
    app.add_routes(routes.routes())
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
    # web.run_app under the connection limits (idle timeout, slots per address, unread answers)
    run_guarded(make_app(index, cfg), sock, GuardLimits.of(cfg))
