"""Run the real retrieval service in a subprocess and wait until it answers /health.

For launchers and tests: `with start_retriever(index_dir) as r: RetrieverClient(r.url) ...`.
The token travels in the child's environment, never on its command line.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.request
from typing import Optional, Sequence

from areal_mem.process import ChildProcess, ready_file_path, serve_command, wait_ready, wait_until
from areal_mem.security import auth_headers

from .command import TOKEN_ENV


class RetrieverHandle:
    """`areal-mem retriever serve` in a subprocess: `.url`, `.health()`, `.stop()`."""

    def __init__(self, child: ChildProcess, token: str):
        self.child, self._token = child, token
        self.url, self.log_path = child.url, child.log_path

    def health(self) -> dict:
        req = urllib.request.Request(self.url + "/health", headers=auth_headers(self._token))
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self, timeout_s: float = 15.0) -> Optional[int]:
        """SIGTERM, then SIGKILL if it has not exited in time."""
        return self.child.stop(timeout_s)

    def __enter__(self) -> RetrieverHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_retriever(
    index_dir: str,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str = "",
    overrides: Sequence[str] = (),
    config_files: Sequence[str] = (),
    timeout_s: float = 180.0,
    log_path: Optional[str] = None,
) -> RetrieverHandle:
    """Start `areal-mem retriever serve` on `index_dir`; returns once /health answers 200.

    `overrides` are `retriever.key=value` config overrides (e.g. `retriever.max_batch_size=1`).
    """
    ready = ready_file_path("retriever")
    cmd = serve_command(
        "retriever", ready, port, "--index", index_dir, "--host", host, *overrides, config_files=config_files
    )
    log_path = log_path or os.path.join(tempfile.mkdtemp(prefix="retriever-"), "serve.log")
    child = ChildProcess("retriever", cmd, log_path, {TOKEN_ENV: token} if token else {})
    child.start()
    try:
        wait_ready(child, ready, timeout_s)
        handle = RetrieverHandle(child, token)
        wait_until(lambda: handle.health()["status"] == "ok", child, timeout_s, "a healthy /health")
        return handle
    except BaseException:
        child.stop()
        raise
