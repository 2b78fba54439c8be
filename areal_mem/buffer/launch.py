"""Start the buffer service as a real subprocess and wait until it answers."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Iterable, Optional

from .client import BufferClient
from .command import READY, TOKEN_ENV


class BufferProcess:
    """`areal-mem buffer serve` in a subprocess; its output goes to `<run_dir>/buffer/serve.log`."""

    def __init__(self, run_dir: str, port: int = 0, token: str = "",
                 overrides: Iterable[str] = (), config_files: Iterable[str] = (),
                 ready_timeout_s: float = 60.0) -> None:
        self.run_dir = run_dir
        self.token = token
        self.log_path = os.path.join(run_dir, "buffer", "serve.log")
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        cmd = [sys.executable, "-m", "areal_mem.cli", "buffer", "serve", "--run-dir", run_dir,
               "--port", str(port)]
        for f in config_files:
            cmd += ["--config", f]
        cmd += list(overrides)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if token:
            env[TOKEN_ENV] = token  # never on the command line
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.url = self._wait_ready(ready_timeout_s)

    def client(self, **kwargs) -> BufferClient:
        return BufferClient(self.url, token=self.token, **kwargs)

    def stop(self, timeout_s: float = 30.0) -> Optional[int]:
        """SIGTERM, then wait; SIGKILL if it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or closed."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def _wait_ready(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        pattern = re.compile(re.escape(READY) + r" (grpc://\S+)")
        while time.monotonic() < deadline:
            match = pattern.search(self._log_tail())
            if match:
                url = match.group(1)
                with BufferClient(url, token=self.token, max_retries=20) as client:
                    client.stats()  # it answers, with the token if any
                return url
            if self.proc.poll() is not None:
                raise RuntimeError(f"buffer service exited with {self.proc.returncode}:\n"
                                   f"{self._log_tail()[-4000:]}")
            time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"buffer service not ready after {timeout_s} s; log {self.log_path}")

    def _log_tail(self) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def __enter__(self) -> "BufferProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
