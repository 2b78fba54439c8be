"""The embedded server's one error type and the one middleware that answers it.

A handler (or anything it calls: the body checks, the engine service) refuses or fails a
request by raising `RequestError(message, status)`; `json_errors` turns it into the JSON
answer. Keeping the answer out of the handlers is what lets every route family share the
same checks: a check raises, it never builds a response.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from aiohttp import web

from areal_mem.security import json_errors_middleware

log = logging.getLogger(__name__)


def error_body(message: str, code: int = 400) -> Dict[str, Any]:
    """SGLang's error shape (its OpenAI-compatible routes answer the same)."""
    return {"error": {"message": message, "code": code}}


class RequestError(Exception):
    """A request answered with HTTP `status` and a JSON body: SGLang's error shape, unless
    the route answers failures in its own shape (`body`; the weight routes'
    `{"success": false, "message"}`)."""

    def __init__(self, message: str, status: int = 400, body: Optional[Dict[str, Any]] = None):
        super().__init__(message)
        self.status = status
        self.body = error_body(message, status) if body is None else body


class BadRequest(RequestError):
    """The client's fault (a 4xx, 400 unless told). Its own name because the weight routes
    head their failure messages with the error's class name, as they always have."""


class ForbiddenPath(BadRequest):
    """A weights path outside the folders this server loads from (403)."""

    def __init__(self, message: str):
        super().__init__(message, 403)


def json_errors() -> Any:
    """The server's error middleware: a `RequestError` is its JSON answer; aiohttp's own
    errors (unknown route, wrong method) get SGLang's error shape through the middleware the
    services share; anything else is logged and answered 500 in that shape, unless the
    answer has started (a stream), where only aiohttp can end the connection."""
    http_errors = json_errors_middleware(error_body)

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        try:
            return await http_errors(request, handler)
        except RequestError as e:
            return web.json_response(e.body, status=e.status)
        except web.HTTPException:
            raise  # below 400 (a redirect): aiohttp answers it
        except Exception as e:
            if request.writer.output_size > 0:  # the same test aiohttp makes before answering an error
                raise
            log.exception("%s %s failed", request.method, request.path)
            return web.json_response(error_body(f"internal error: {type(e).__name__}: {e}", 500), status=500)

    return middleware
