"""`launcher: local`: every service of a run as a child process of this machine.

Order: retriever, generators, buffer (each healthy before the next starts), then
the learner and the rollout workers. A rollout worker or generator that dies is
restarted (a generator first gets the latest published weights); the learner
finishing ends the run; SIGINT/SIGTERM stop every child, each in its own process
group, so nothing is orphaned. Logs: `<run_dir>/logs/<name>.log`.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from omegaconf import DictConfig

from ..process import ChildProcess, ready_file_path, wait_ready

log = logging.getLogger(__name__)
CLI = [sys.executable, "-m", "areal_mem.cli"]


@dataclass
class Addresses:
    retriever: List[str] = field(default_factory=list)
    generators: List[str] = field(default_factory=list)
    buffer: str = ""

    def overrides(self) -> List[str]:
        out = [f"generator.urls=[{','.join(self.generators)}]", f"buffer.url={self.buffer}"]
        if self.retriever:
            out.append(f"retriever.urls=[{','.join(self.retriever)}]")
        return out


class LocalLauncher:
    def __init__(self, cfg: DictConfig, config_path: str, poll_s: float = 1.0) -> None:
        self.cfg, self.config_path, self.poll_s = cfg, config_path, poll_s
        self.logs = os.path.join(cfg.run_dir, "logs")
        self.services: Dict[str, ChildProcess] = {}
        self.workers: Dict[str, ChildProcess] = {}
        self.learner: Optional[ChildProcess] = None
        self.addresses = Addresses()
        self._stopping = False

    # ---- starting ----
    def _start_service(self, name: str, cmd: List[str], env: Optional[Dict[str, str]] = None) -> str:
        ready = ready_file_path(name)
        child = ChildProcess(name, cmd + ["--ready-file", ready],
                             os.path.join(self.logs, f"{name}.log"), env or {}).start()
        self.services[name] = child
        url = wait_ready(child, ready, self.cfg.launcher.health_timeout_s)
        log.info("%s ready at %s", name, url)
        return url

    def start_services(self) -> Addresses:
        cfg = self.cfg
        if not cfg.retriever.urls:
            self.addresses.retriever = [self._start_service(
                "retriever", CLI + ["retriever", "serve", "--config", self.config_path])]
        else:
            self.addresses.retriever = list(cfg.retriever.urls)
        if not cfg.generator.urls:
            self.addresses.generators = [self._start_service(f"generator{i}", self._generator_cmd())
                                         for i in range(cfg.generator.num_servers)]
        else:
            self.addresses.generators = list(cfg.generator.urls)
        if not cfg.buffer.url:
            self.addresses.buffer = self._start_service(
                "buffer", CLI + ["buffer", "serve", "--config", self.config_path])
        else:
            self.addresses.buffer = cfg.buffer.url
        return self.addresses

    def _generator_cmd(self, model_path: str = "") -> List[str]:
        return CLI + ["generator", "serve", "--config", self.config_path,
                      *(["--model", model_path] if model_path else [])]

    def start_learner(self, extra: List[str] = ()) -> None:
        self.learner = ChildProcess("learner", CLI + ["learner", "--config", self.config_path,
                                                      *self.addresses.overrides(), *extra],
                                    os.path.join(self.logs, "learner.log")).start()

    def start_workers(self) -> None:
        n = self.cfg.rollout.num_workers
        for i in range(n):
            self.workers[f"rollout{i}"] = self._worker(i, n).start()

    def _worker(self, i: int, n: int) -> ChildProcess:
        return ChildProcess(f"rollout{i}", CLI + ["rollout", "--config", self.config_path,
                                                  "--worker-id", str(i), "--num-workers", str(n),
                                                  *self.addresses.overrides()],
                            os.path.join(self.logs, f"rollout{i}.log"))

    # ---- supervising ----
    def supervise(self, on_tick: Optional[Callable[[], None]] = None) -> int:
        """Run until the learner exits; its exit code is the run's. Restart failed children."""
        assert self.learner is not None, "start_learner first"
        while True:
            code = self.learner.returncode
            if code is not None:
                if code != 0:
                    log.error("%s", self.learner.failure("failed").args[0])
                return code
            for name, child in list(self.workers.items()):
                if not child.alive() and not self._stopping:
                    self._restart(child, lambda c=child: c.start())
            for name, child in list(self.services.items()):
                if name.startswith("generator") and not child.alive() and not self._stopping:
                    self._restart(child, lambda c=child: self._restart_generator(c))
            if on_tick:
                on_tick()
            time.sleep(self.poll_s)

    def _restart(self, child: ChildProcess, start: Callable[[], object]) -> None:
        if not self.cfg.launcher.restart_failed:
            raise child.failure("died and launcher.restart_failed is off")
        child.restarts += 1
        log.warning("%s exited with %s; restart #%d", child.name, child.returncode, child.restarts)
        start()

    def _restart_generator(self, child: ChildProcess) -> None:
        """Same address, latest published weights (the disk publisher's newest export, if any)."""
        latest = latest_weights(self.cfg.run_dir)
        child.cmd = [a for a in child.cmd]  # same port: clients keep their address
        if latest:
            child.cmd = self._generator_cmd(latest) + child.cmd[len(self._generator_cmd()):]
        child.start()

    # ---- stopping ----
    def stop_all(self) -> None:
        """Workers first (no new groups), then the learner, then the services in reverse order."""
        self._stopping = True
        children = list(self.workers.values()) + ([self.learner] if self.learner else []) + \
            list(reversed(list(self.services.values())))
        for child in children:
            child.signal_group(signal.SIGTERM)
        for child in children:
            child.stop(timeout_s=20)


def latest_weights(run_dir: str) -> str:
    """The newest HF export under `<run_dir>/weights/` (written by the disk publisher), or ''."""
    root = os.path.join(run_dir, "weights")
    if not os.path.isdir(root):
        return ""
    versions = [d for d in os.listdir(root) if os.path.exists(os.path.join(root, d, "config.json"))]
    if not versions:
        return ""
    return os.path.join(root, max(versions, key=lambda d: os.path.getmtime(os.path.join(root, d))))
