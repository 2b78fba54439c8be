"""Start the buffer service as a real subprocess and wait until it answers."""

from __future__ import annotations

import os
from typing import Iterable, Optional

from ...process import ChildProcess, ready_file_path, serve_command, wait_ready
from ..client import BufferClient
from ..wire import TOKEN_ENV


class BufferProcess:
    """`areal-mem buffer serve` in a subprocess; its output goes to `<run_dir>/buffer/serve.log`."""

    def __init__(
        self,
        run_dir: str,
        port: int = 0,
        token: str = "",
        overrides: Iterable[str] = (),
        config_files: Iterable[str] = (),
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.run_dir, self.token = run_dir, token
        ready = ready_file_path("buffer")
        cmd = serve_command("buffer", ready, port, "--run-dir", run_dir, *overrides, config_files=list(config_files))
        self.child = ChildProcess(
            "buffer",
            cmd,
            os.path.join(run_dir, "buffer", "serve.log"),
            {TOKEN_ENV: token} if token else {},
        ).start()  # never on argv
        self.log_path = self.child.log_path
        self.url = wait_ready(self.child, ready, ready_timeout_s)
        self.client(max_retries=20).stats()  # answers, with the token if any

    def client(self, **kwargs) -> BufferClient:
        return BufferClient(self.url, token=self.token, **kwargs)

    def stop(self, timeout_s: float = 30.0) -> Optional[int]:
        """SIGTERM, then wait; SIGKILL if it does not stop in time."""
        return self.child.stop(timeout_s)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or closed."""
        self.child.kill()

    def __enter__(self) -> BufferProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
