"""Run the real retrieval service in a subprocess and wait until it answers /health.

For launchers and tests: `with start_retriever(index_dir) as r: RetrieverClient(r.url) ...`.
The token travels in the child's environment, never on its command line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Optional, Sequence

from areal_mem.security import auth_headers

from .command import TOKEN_ENV


@dataclass
class RetrieverHandle:
    url: str
    process: subprocess.Popen
    log_path: str
    token: str = field(default="", repr=False)

    def health(self) -> dict:
        req = urllib.request.Request(self.url + "/health", headers=auth_headers(self.token))
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "RetrieverHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _log_tail(path: str, n: int = 3000) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-n:]


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
    workdir = tempfile.mkdtemp(prefix="retriever-")
    ready = os.path.join(workdir, "url")
    log_path = log_path or os.path.join(workdir, "serve.log")
    cmd = [sys.executable, "-m", "areal_mem.cli", "retriever", "serve", "--index", index_dir,
           "--host", host, "--port", str(port), "--ready-file", ready]
    for f in config_files:
        cmd += ["--config", f]
    cmd += list(overrides)
    env = dict(os.environ)
    env.pop(TOKEN_ENV, None)
    if token:
        env[TOKEN_ENV] = token
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    handle = RetrieverHandle("", proc, log_path, token)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"retriever exited with code {proc.returncode} before it was ready:\n"
                                   + _log_tail(log_path))
            if not handle.url and os.path.exists(ready):
                with open(ready) as f:
                    handle.url = f.read().strip()
            if handle.url:
                try:
                    handle.health()
                    return handle
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
            time.sleep(0.1)
        raise TimeoutError(f"retriever not healthy after {timeout_s}s:\n" + _log_tail(log_path))
    except BaseException:
        handle.stop()
        raise
