"""`launcher: local`: every process of a run (`plan.py`) as a child of this machine.

Services start in order, each ready (its URL in its ready file) before the next;
then the learner ranks and the rollout workers. A rollout worker or generator
that dies is restarted after a backoff (0, 1, 3, 7... s, at most 30 s; at most
`launcher.max_restarts` times), a generator on its old port with the newest
published weights; the learner finishing ends the run; `stop_all` (also on SIGINT/SIGTERM)
stops every child, each in its own process group, so nothing is orphaned.
Logs: `<run_dir>/logs/<name>.log`.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import urlparse

from omegaconf import DictConfig

from ..net import free_port
from ..process import ChildProcess, ready_file_path, wait_ready
from .plan import Addresses, ProcessSpec, generator_argv, learner_specs, service_specs, worker_specs

log = logging.getLogger(__name__)
CLI = [sys.executable, "-m", "areal_mem.cli"]


class LocalLauncher:
    def __init__(self, cfg: DictConfig, config_path: str, poll_s: float = 1.0) -> None:
        self.cfg, self.config_path, self.poll_s = cfg, config_path, poll_s
        self.logs = os.path.join(cfg.run_dir, "logs")
        self.children: Dict[str, ChildProcess] = {}
        self.specs: Dict[str, ProcessSpec] = {}
        self.learners: List[ChildProcess] = []
        self.addresses = Addresses(list(cfg.retriever.urls), list(cfg.generator.urls), cfg.buffer.url)
        self._stopping = False
        self._restart_due: Dict[str, float] = {}  # name -> when a dead child restarts (backoff)

    def _start(self, spec: ProcessSpec, argv: Optional[List[str]] = None) -> ChildProcess:
        argv = list(argv or spec.argv)
        ready = ready_file_path(spec.name) if spec.service else ""
        child = ChildProcess(spec.name, CLI + argv + (["--ready-file", ready] if ready else []),
                             os.path.join(self.logs, f"{spec.name}.log"), dict(spec.env)).start()
        self.children[spec.name], self.specs[spec.name] = child, spec
        if ready:
            wait_ready(child, ready, self.cfg.launcher.health_timeout_s)
            log.info("%s ready at %s", spec.name, child.url)
        return child

    def start_services(self) -> Addresses:
        for spec in service_specs(self.cfg, self.config_path):
            url = self._start(spec).url
            if spec.name == "retriever":
                self.addresses.retriever = [url]
            elif spec.name == "buffer":
                self.addresses.buffer = url
            else:
                self.addresses.generators.append(url)
        return self.addresses

    def start_learner(self) -> None:
        port = free_port()
        self.learners = [self._start(s) for s in learner_specs(
            self.cfg, self.config_path, self.addresses, "127.0.0.1", port)]

    def start_workers(self) -> None:
        for spec in worker_specs(self.cfg, self.config_path, self.addresses):
            self._start(spec)

    def supervise(self, on_tick: Optional[Callable[[], None]] = None) -> int:
        """Until rank 0 of the learner exits (its code is the run's); restart what may restart."""
        while True:
            codes = [c.returncode for c in self.learners]
            failed = [c for c in self.learners if c.returncode not in (None, 0)]
            if failed:
                log.error("%s", failed[0].failure("failed").args[0])
                return failed[0].returncode
            if codes and codes[0] is not None:
                return codes[0]
            now = time.monotonic()
            for name, child in list(self.children.items()):
                if not self.specs[name].restart or child.alive() or self._stopping:
                    continue
                due = self._restart_due.setdefault(name, now + min(30.0, 2.0 ** child.restarts - 1))
                if now >= due:
                    del self._restart_due[name]
                    self._restart(name, child)
            if on_tick:
                on_tick()
            time.sleep(self.poll_s)

    def _restart(self, name: str, child: ChildProcess) -> None:
        limit = self.cfg.launcher.max_restarts
        if not self.cfg.launcher.restart_failed or child.restarts >= limit:
            raise child.failure(f"died after {child.restarts} restart(s) (launcher.restart_failed="
                                f"{self.cfg.launcher.restart_failed}, launcher.max_restarts={limit})")
        log.warning("%s exited with %s; restart %d of at most %d", name, child.returncode,
                    child.restarts + 1, limit)
        argv = None
        if name.startswith("generator"):  # same address, newest weights
            path, version = latest_weights(self.cfg.run_dir)
            argv = generator_argv(self.config_path, path, urlparse(child.url).port or 0, version)
        restarts = child.restarts + 1
        self._start(self.specs[name], argv).restarts = restarts

    def stop_all(self) -> None:
        """Reverse start order: workers (no new groups), learner, then the services."""
        self._stopping = True
        order = list(reversed(self.children.values()))  # a restart keeps its first position
        for child in order:
            child.signal_group(signal.SIGTERM)
        for child in order:
            child.stop(timeout_s=20)


def latest_weights(run_dir: str) -> Tuple[str, int]:
    """The newest push of the disk publisher (`<run_dir>/weights`) and its version, or ('', 0).
    With the distributed publisher a restarted generator serves `model.path` until the next push."""
    from learner.publishers.disk import pushed_versions

    pushes = pushed_versions(os.path.join(run_dir, "weights"))
    if not pushes:
        return "", 0
    version, path = pushes[-1]
    return path, version
