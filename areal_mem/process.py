"""Child processes of areal-mem: services and workers started, watched and stopped alike.

Every `serve` command takes `--ready-file PATH` and writes its URL there once it
serves, so a launcher can ask for port 0 (no races between parallel runs) and
learn the address without parsing logs. Children run in their own
session (process group), so stopping one stops everything it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

# How every child runs areal-mem: the installed command line, with the working directory kept off
# sys.path (-P; PYTHONSAFEPATH=1 in the environment for what the child starts in turn, e.g.
# torchrun's ranks), so the folder where a run starts (a checkout's `areal_mem/`, which lacks the
# mapped service folders, or a user's own modules) never replaces the installed package in a child.
CLI = (sys.executable, "-P", "-m", "areal_mem.app.cli")


def cli_command(*args: str) -> List[str]:
    """The argv of one `areal-mem ARGS...` child process."""
    return [*CLI, *args]


def serve_command(
    service: str, ready_file: str, port: int, *options: str, config_files: Sequence[str] = ()
) -> List[str]:
    """`areal-mem <service> serve` as a launcher starts it: on `port` (0: the OS picks one), the URL
    written to `ready_file` once it serves, `options` (flags, then key=value overrides) and config files."""
    cmd = cli_command(service, "serve", "--port", str(port), "--ready-file", ready_file)
    for path in config_files:
        cmd += ["--config", path]
    return cmd + list(options)


@dataclass
class ChildProcess:
    name: str
    cmd: List[str]
    log_path: str
    env: Dict[str, str] = field(default_factory=dict)  # added to os.environ (tokens go here)
    proc: Optional[subprocess.Popen] = None
    url: str = ""
    restarts: int = 0

    def start(self) -> ChildProcess:
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1", **self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        return None if self.proc is None else self.proc.poll()

    @property
    def pid(self) -> int:
        """The process (and its group's) id; 0 before `start`."""
        return self.proc.pid if self.proc is not None else 0

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def signal_group(self, sig: int) -> None:
        if self.proc is not None and self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout_s: float = 15.0) -> Optional[int]:
        """SIGTERM the process group; SIGKILL it if it has not exited in time."""
        if self.proc is None:
            return None
        self.signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the whole group: a crash, nothing flushed."""
        if self.proc is None:
            return
        self.signal_group(signal.SIGKILL)
        self.proc.wait()

    def failure(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"{self.name} {what} (exit code {self.returncode}); last lines of {self.log_path}:\n{self.log_tail()}"
        )


def ready_file_path(name: str) -> str:
    """A fresh path (not yet existing) for a child to write its URL into."""
    fd, path = tempfile.mkstemp(prefix=f"areal-mem-{name}-", suffix=".ready")
    os.close(fd)
    os.unlink(path)
    return path


def wait_ready(child: ChildProcess, ready_file: str, timeout_s: float) -> str:
    """Block until `child` wrote its URL to `ready_file`; raise with its log if it died first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(ready_file):
            with open(ready_file, encoding="utf-8") as f:
                text = f.read().strip()
            if text:
                os.unlink(ready_file)
                child.url = text
                return text
        if not child.alive():
            raise child.failure("exited before it was ready")
        time.sleep(0.05)
    child.kill()
    raise child.failure(f"was not ready after {timeout_s:.0f}s")


def wait_until(check: Callable[[], bool], child: ChildProcess, timeout_s: float, what: str) -> None:
    """Poll `check` until it is true; fail early with the child's log if the child dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not ready yet; the service may still be starting
            pass
        if not child.alive():
            raise child.failure(f"exited while waiting for {what}")
        time.sleep(0.2)
    raise child.failure(f"did not reach {what} after {timeout_s:.0f}s")


def write_ready_file(path: str, url: str) -> None:
    """For `serve` commands: publish the URL atomically (write then rename) once serving."""
    if not path:
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(url)
    os.replace(tmp, path)
