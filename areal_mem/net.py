"""Small network helpers shared by launchers and tests."""

from __future__ import annotations

import socket
from typing import Optional
from urllib.parse import urlsplit


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free now (the OS picks it); race-free enough for local launches and tests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def unreachable(url: str, timeout_s: float = 3.0) -> Optional[str]:
    """Why no connection opens to `url`'s host and port, or None when one does. A command given
    the address of a server checks it once before its work: a request client would retry and then
    fail deep in a traceback, when the usual cause is an address left from a finished run."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError as e:
        return f"not a url: {e}"
    if not parts.hostname or port is None:
        return "not a url with a host and a port"
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return None
    except OSError as e:
        return e.strerror or type(e).__name__
