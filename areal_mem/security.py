"""Bind and token rules shared by every service.

Loopback is the default everywhere; binding any other address without a shared
token is refused, because the services accept weights paths and training data.
Tokens travel in `AREAL_MEM_<SERVICE>_TOKEN` environment variables, never on a
command line or in a config file written to the run dir (`redact_tokens`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from aiohttp import web
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:  # config.loading imports this module
    from .config import RunConfig

SERVICES = ("retriever", "generator", "buffer")  # each has a `<service>.token` config key
REDACTED = ""  # what a written config holds instead of a token (empty: read from the env)


class InsecureBindError(RuntimeError):
    pass


def token_env(service: str) -> str:
    """The environment variable that carries `service`'s shared token."""
    return f"AREAL_MEM_{service.upper()}_TOKEN"


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(service: str, host: str, token: Optional[str]) -> None:
    """Refuse a non-loopback bind that has no shared token (before anything binds)."""
    if not is_loopback(host) and not token:
        raise InsecureBindError(
            f"{service}: refusing to bind {host!r} without a shared token; set ${token_env(service)} "
            f"(or {service}.token; clients send `Authorization: Bearer <token>`) or bind 127.0.0.1 "
            f"(the default)"
        )


def token_matches(header_value: Optional[str], token: str) -> bool:
    """Constant-time check of an `Authorization: Bearer <token>` header value."""
    # RFC 7235: the auth scheme is case-insensitive ("bearer", "BEARER"); one or more spaces follow it
    scheme, _, credentials = (header_value or "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip(" "):
        return False
    return hmac.compare_digest(credentials.strip(" ").encode(), token.encode())


def bearer_auth_middleware(token: Optional[str]):
    """aiohttp middleware answering 401 on every route when a token is set and not presented."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        if token and not token_matches(request.headers.get("Authorization"), token):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        return await handler(request)

    return middleware


def json_errors_middleware(body: Callable[[str, int], Any]):
    """aiohttp middleware giving aiohttp's own errors (an unknown route, a wrong method, a body
    over the limit) the service's JSON error shape `body(message, status)` instead of plain
    text, so a client parses them like the service's own 4xx answers."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        try:
            return await handler(request)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            message = f"{request.method} {request.path}: {e.reason}"
            allow = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else None
            if allow:
                message += f" (allowed: {allow['Allow']})"
            return web.json_response(body(message, e.status), status=e.status, headers=allow)

    return middleware


def auth_headers(token: Optional[str]) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


def redact_tokens(cfg: RunConfig | DictConfig) -> tuple[DictConfig, Dict[str, str]]:
    """A copy of `cfg` without the services' tokens, and the env variables that carry them.

    A config written to the run dir is read by the children of a run; with the tokens moved to
    their environment variables they still authenticate, and no file on disk holds a token.
    """
    out, env = OmegaConf.structured(cfg), {}  # a copy, from the RunConfig or a DictConfig
    for service in SERVICES:
        token = OmegaConf.select(out, f"{service}.token", default=None)
        if token:
            env[token_env(service)] = token
            OmegaConf.update(out, f"{service}.token", REDACTED)
    return out, env


def export_tokens(env: Dict[str, str]) -> None:
    """Hand tokens to every child started after this (children inherit os.environ)."""
    os.environ.update(env)
