"""Start generator servers as subprocesses and wait until they answer `/health`.

`start_embedded_generator` runs `areal-mem generator serve` (the embedded PyTorch server);
`start_sglang_servers` runs `python -m sglang.launch_server` for the GPU path;
`start_generators(cfg, model_path)` picks by `generator.backend`. All return handles with
`.url` and `.stop()`. The embedded server gets its token through the environment, never
on the command line (where `ps` would show it); SGLang only takes `--api-key`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import urllib.request
from dataclasses import asdict, dataclass
from typing import List, Optional, Sequence

from areal_mem.config.generator import EmbeddedConfig, GeneratorBackend, GeneratorConfig, GeneratorLoraConfig
from areal_mem.net import free_port
from areal_mem.process import ChildProcess, ready_file_path, serve_command, wait_ready, wait_until
from areal_mem.security import auth_headers, check_bind

from .client import TOKEN_ENV


@dataclass
class ServerHandle:
    url: str
    child: ChildProcess
    temp_log: bool = False  # the log is a temp file of ours: removed after a clean exit

    @property
    def log_path(self) -> str:
        return self.child.log_path

    def log_tail(self, n: int = 4000) -> str:
        return self.child.log_tail(n)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the server's process group, SIGKILL it if it does not exit in time."""
        if self.child.stop(timeout_s) == 0 and self.temp_log and os.path.exists(self.log_path):
            os.unlink(self.log_path)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _log_path(name: str) -> str:
    fd, path = tempfile.mkstemp(prefix=f"areal-mem-{name}-", suffix=".log")
    os.close(fd)
    return path


def health_ok(url: str, token: str) -> bool:
    req = urllib.request.Request(url + "/health", headers=auth_headers(token))
    with urllib.request.urlopen(req, timeout=2) as r:
        return r.status == 200


def start_embedded_generator(
    model_path: str,
    embedded: Optional[EmbeddedConfig] = None,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str = "",
    startup_timeout_s: float = 180.0,
    log_path: str = "",
    weight_version: str = "0",
    lora: Optional[GeneratorLoraConfig] = None,
) -> ServerHandle:
    """A real embedded server in a subprocess, healthy on return. port 0: the OS picks one.
    `embedded` (default: the schema's) goes whole to the child as `generator.embedded.*` overrides."""
    check_bind("generator", host, token)
    ready = ready_file_path("generator")
    settings = asdict(embedded or EmbeddedConfig())
    settings["weights_dirs"] = [os.path.abspath(d) for d in settings["weights_dirs"]]
    overrides = [f"generator.embedded.{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in settings.items()]
    overrides += lora_overrides(lora)
    cmd = serve_command(
        "generator", ready, port, "--model", model_path, "--host", host, "--weight-version", weight_version, *overrides
    )
    child = ChildProcess(
        "generator", cmd, log_path or _log_path("generator"), {TOKEN_ENV: token} if token else {}
    ).start()
    try:
        url = wait_ready(child, ready, startup_timeout_s)
        wait_until(lambda: health_ok(url, token), child, startup_timeout_s, "/health")
    except BaseException:
        child.stop()
        raise
    return ServerHandle(url, child, temp_log=not log_path)


def lora_args(lora: GeneratorLoraConfig) -> List[str]:
    """SGLang's LoRA flags for `generator.lora` (none when it is off)."""
    if not lora.enabled:
        return []
    return [
        "--enable-lora",
        "--max-lora-rank",
        str(lora.max_rank),
        "--lora-target-modules",
        *lora.target_modules,
        "--max-loras-per-batch",
        str(lora.max_loras),
    ]


def lora_overrides(lora: Optional[GeneratorLoraConfig]) -> List[str]:
    """`generator.lora.*` overrides that give an embedded child the same LoRA settings."""
    if lora is None or not lora.enabled:
        return []
    targets = json.dumps(list(lora.target_modules))
    return [
        "generator.lora.enabled=true",
        f"generator.lora.max_rank={lora.max_rank}",
        f"generator.lora.target_modules={targets}",
        f"generator.lora.max_loras={lora.max_loras}",
    ]


def sglang_command(
    model_path: str,
    host: str,
    port: int,
    tp_size: int = 1,
    base_gpu_id: int = 0,
    extra_args: Sequence[str] = (),
    token: str = "",
) -> List[str]:
    """The argv of one `python -m sglang.launch_server`; tests/generator/test_sglang_args.py parses it
    with SGLang 0.5.23's own argument parser."""
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_path, "--host", host]
    cmd += ["--port", str(port), "--tp-size", str(tp_size), "--base-gpu-id", str(base_gpu_id), *extra_args]
    if token:
        cmd += ["--api-key", token]  # sglang takes no env var for it
    return cmd


def start_sglang_servers(
    model_path: str,
    num_servers: int = 1,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str = "",
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = 900.0,
    gpus_per_server: int = 1,
) -> List[ServerHandle]:
    """`python -m sglang.launch_server` per server (GPU path), each on its own GPUs."""
    check_bind("generator", host, token)
    handles: List[ServerHandle] = []
    try:
        for i in range(num_servers):
            p = port + i if port else free_port(host)
            cmd = sglang_command(model_path, host, p, gpus_per_server, i * gpus_per_server, extra_args, token)
            child = ChildProcess(f"sglang{i}", cmd, _log_path(f"sglang{i}")).start()
            handles.append(ServerHandle(f"http://{host}:{p}", child, temp_log=True))
        for h in handles:
            wait_until(lambda: health_ok(h.url, token), h.child, startup_timeout_s, "/health")
    except BaseException:
        for h in handles:
            h.stop()
        raise
    return handles


def start_generators(cfg: GeneratorConfig, model_path: str) -> List[ServerHandle]:
    """`cfg.num_servers` servers of `cfg.backend` (a `GeneratorConfig`), all healthy on return."""
    if cfg.backend == GeneratorBackend.sglang:
        return start_sglang_servers(
            model_path,
            cfg.num_servers,
            cfg.host,
            cfg.port,
            cfg.token,
            list(cfg.sglang_args) + lora_args(cfg.lora),
            cfg.startup_timeout_s,
        )
    handles: List[ServerHandle] = []
    try:
        for i in range(cfg.num_servers):
            handles.append(
                start_embedded_generator(
                    model_path,
                    cfg.embedded,
                    cfg.host,
                    cfg.port + i if cfg.port else 0,
                    cfg.token,
                    cfg.startup_timeout_s,
                    lora=cfg.lora,
                )
            )
    except BaseException:
        for h in handles:
            h.stop()
        raise
    return handles
