"""Start generator servers as subprocesses and wait until they answer `/health`.

`start_embedded_generator` runs `areal-mem generator serve` (the embedded PyTorch server);
`start_sglang_servers` runs `python -m sglang.launch_server` for the GPU path. Both return
handles with `.url` and `.stop()`. The embedded server gets its token through the
environment, never on the command line (where `ps` would show it); SGLang only takes
`--api-key`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from areal_mem.net import free_port
from areal_mem.security import auth_headers, check_bind

TOKEN_ENV = "AREAL_MEM_GENERATOR_TOKEN"


@dataclass
class ServerHandle:
    url: str
    process: subprocess.Popen
    log_path: str
    _closed: bool = field(default=False, repr=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the server's process group, SIGKILL it if it does not exit in time."""
        if self._closed:
            return
        self._closed = True
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            except ProcessLookupError:
                pass

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _spawn(cmd: List[str], token: str, log_path: Optional[str]) -> tuple:
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="generator-", suffix=".log")
        os.close(fd)
    env = dict(os.environ)
    if token:
        env[TOKEN_ENV] = token
    log = open(log_path, "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    return proc, log_path


def wait_healthy(handle: ServerHandle, token: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    req = urllib.request.Request(handle.url + "/health", headers=auth_headers(token))
    while time.monotonic() < deadline:
        if not handle.alive():
            raise RuntimeError(f"generator exited with code {handle.process.returncode}; "
                               f"log {handle.log_path}:\n{handle.log_tail()}")
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    handle.stop()
    raise TimeoutError(f"generator at {handle.url} not healthy after {timeout_s}s; "
                       f"log {handle.log_path}:\n{handle.log_tail()}")


def start_embedded_generator(model_path: str, host: str = "127.0.0.1", port: int = 0,
                             token: str = "", max_batch_size: int = 32, device: str = "cpu",
                             dtype: str = "float32", max_context_len: int = 0,
                             startup_timeout_s: float = 180.0, log_path: Optional[str] = None,
                             torch_threads: int = 1, weight_group_timeout_s: float = 600.0) -> ServerHandle:
    """A real embedded server in a subprocess, healthy on return. port 0: the OS picks one."""
    check_bind("generator", host, token)
    fd, port_file = tempfile.mkstemp(prefix="generator-port-")
    os.close(fd)
    os.unlink(port_file)
    cmd = [sys.executable, "-m", "areal_mem.cli", "generator", "serve", "--model", model_path,
           "--host", host, "--port", str(port), "--port-file", port_file,
           "--max-batch-size", str(max_batch_size), "--device", device, "--dtype", dtype,
           "--max-context-len", str(max_context_len), "--torch-threads", str(torch_threads),
           "--weight-group-timeout", str(weight_group_timeout_s)]
    proc, log_path = _spawn(cmd, token, log_path)
    deadline = time.monotonic() + startup_timeout_s
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            handle = ServerHandle(f"http://{host}:{port}", proc, log_path)
            handle.stop()
            raise RuntimeError(f"generator did not start (exit {proc.returncode}); log {log_path}:\n"
                               f"{handle.log_tail()}")
        time.sleep(0.1)
    with open(port_file, encoding="utf-8") as f:
        bound = int(f.read().strip())
    os.unlink(port_file)
    handle = ServerHandle(f"http://{host}:{bound}", proc, log_path)
    wait_healthy(handle, token, max(1.0, deadline - time.monotonic()))
    return handle


def start_sglang_servers(model_path: str, num_servers: int = 1, host: str = "127.0.0.1",
                         port: int = 0, token: str = "", extra_args: Sequence[str] = (),
                         startup_timeout_s: float = 900.0, gpus_per_server: int = 1) -> List[ServerHandle]:
    """`python -m sglang.launch_server` per server (GPU path), each on its own GPUs."""
    check_bind("generator", host, token)
    handles: List[ServerHandle] = []
    try:
        for i in range(num_servers):
            p = port + i if port else free_port(host)
            cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_path,
                   "--host", host, "--port", str(p), "--tp-size", str(gpus_per_server),
                   "--base-gpu-id", str(i * gpus_per_server), *extra_args]
            if token:
                cmd += ["--api-key", token]  # sglang takes no env var for it
            proc, log_path = _spawn(cmd, "", None)
            handles.append(ServerHandle(f"http://{host}:{p}", proc, log_path))
        for h in handles:
            wait_healthy(h, token, startup_timeout_s)
    except BaseException:
        for h in handles:
            h.stop()
        raise
    return handles


def start_generators(cfg, model_path: str) -> List[ServerHandle]:
    """`cfg.num_servers` servers of `cfg.backend` (a `GeneratorConfig`), all healthy on return."""
    if cfg.backend == "sglang":
        return start_sglang_servers(model_path, cfg.num_servers, cfg.host, cfg.port, cfg.token,
                                    list(cfg.sglang_args), cfg.startup_timeout_s)
    handles: List[ServerHandle] = []
    try:
        for i in range(cfg.num_servers):
            handles.append(start_embedded_generator(
                model_path, cfg.host, cfg.port + i if cfg.port else 0, cfg.token, cfg.max_batch_size,
                cfg.device, cfg.dtype, cfg.max_context_len, cfg.startup_timeout_s,
                torch_threads=cfg.torch_threads, weight_group_timeout_s=cfg.weight_group_timeout_s))
    except BaseException:
        for h in handles:
            h.stop()
        raise
    return handles
