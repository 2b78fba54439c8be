"""Bind and token rules shared by every service.

Loopback is the default everywhere; binding any other address without a shared
token is refused, because the services accept weights paths and training data.
"""
from __future__ import annotations

import hmac
import ipaddress
from typing import Optional

from aiohttp import web


class InsecureBindError(RuntimeError):
    pass


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(service: str, host: str, token: Optional[str]) -> None:
    """Refuse a non-loopback bind that has no shared token."""
    if not is_loopback(host) and not token:
        raise InsecureBindError(
            f"{service}: refusing to bind {host!r} without a shared token; set the service's "
            f"`token` (clients send `Authorization: Bearer <token>`) or bind 127.0.0.1"
        )


def token_matches(header_value: Optional[str], token: str) -> bool:
    """Constant-time check of an `Authorization: Bearer <token>` header value."""
    if not header_value or not header_value.startswith("Bearer "):
        return False
    return hmac.compare_digest(header_value[len("Bearer "):].encode(), token.encode())


def bearer_auth_middleware(token: Optional[str]):
    """aiohttp middleware answering 401 on every route when a token is set and not presented."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        if token and not token_matches(request.headers.get("Authorization"), token):
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        return await handler(request)

    return middleware


def auth_headers(token: Optional[str]) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}
