"""`launcher: local`: every process of a run (`plan.py`) as a child of this machine.

Services start in order, each ready (its URL in its ready file) before the next;
then the learner ranks and the rollout workers. A process that dies is restarted
after a backoff (0, 1, 3, 7... s, at most 30 s; at most `launcher.max_restarts`
times): a rollout worker as it was; a service (generator, buffer, retriever) on its
old port, so every client reaches it again at the same address (`retriever.replicas` > 1:
the clients fail over to the other replicas meanwhile; the buffer recovers
from its run dir); a generator with the current weights: the disk publisher's newest
push, or, under the distributed publisher, paused until the learner has pushed the
weights it last published into it (`learner/publishers`); the learner ranks together,
resuming from the last checkpoint (`launcher.restart_learner`, `learner.resume: auto`).
The learner finishing ends the run; `stop_all` (also on SIGINT/SIGTERM) stops every
child, each in its own process group, so nothing is orphaned.
Logs: `<run_dir>/logs/<name>.log`.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import signal
import time
from typing import Callable, Dict, List, Optional, Protocol, Tuple
from urllib.parse import urlparse

from areal_mem.config import RunConfig
from areal_mem.net import free_port
from areal_mem.process import ChildProcess, cli_command, ready_file_path, wait_ready

from .plan import (
    Addresses,
    ProcessSpec,
    evaluator_specs,
    generator_argv,
    learner_specs,
    service_specs,
    worker_specs,
)

log = logging.getLogger(__name__)


class Supervised(Protocol):
    """What the launcher supervises: a local `ChildProcess`, or the Ray launcher's process in an actor."""

    name: str
    log_path: str
    url: str
    restarts: int

    @property
    def returncode(self) -> Optional[int]: ...

    @property
    def pid(self) -> int: ...

    def alive(self) -> bool: ...

    def signal_group(self, sig: int) -> None: ...

    def stop(self, timeout_s: float = 15.0) -> Optional[int]: ...

    def kill(self) -> None: ...

    def failure(self, what: str) -> RuntimeError: ...


class LocalLauncher:
    def __init__(self, cfg: RunConfig, config_path: str, poll_s: float = 1.0) -> None:
        self.cfg, self.config_path, self.poll_s = cfg, config_path, poll_s
        self.logs = os.path.join(cfg.run_dir, "logs")
        self.children: Dict[str, Supervised] = {}
        self.specs: Dict[str, ProcessSpec] = {}
        self.learners: List[Supervised] = []
        self.addresses = Addresses(list(cfg.retriever.urls), list(cfg.generator.urls), cfg.buffer.url)
        self._stopping = False
        self._restart_due: Dict[str, float] = {}  # name -> when a dead child restarts (backoff)

    def _start(self, spec: ProcessSpec, argv: Optional[List[str]] = None) -> Supervised:
        argv = list(argv or spec.argv)
        ready = ready_file_path(spec.name) if spec.service else ""
        child = ChildProcess(
            spec.name,
            cli_command(*argv, *(["--ready-file", ready] if ready else [])),
            os.path.join(self.logs, f"{spec.name}.log"),
            dict(spec.env),
        ).start()
        self.children[spec.name], self.specs[spec.name] = child, spec
        if ready:
            wait_ready(child, ready, self.cfg.launcher.health_timeout_s)
            log.info("%s ready at %s", spec.name, child.url)
        return child

    def start_services(self) -> Addresses:
        specs = service_specs(self.cfg, self.config_path)
        if any(s.name.startswith("retriever") for s in specs):
            self.addresses.retriever = []
        for spec in specs:
            url = self._start(spec).url
            if spec.name.startswith("retriever"):  # retriever, or replicas retriever0, retriever1, ...
                self.addresses.retriever.append(url)
            elif spec.name == "buffer":
                self.addresses.buffer = url
            else:
                self.addresses.generators.append(url)
        return self.addresses

    def start_learner(self) -> None:
        check_extension_locks(self.cfg.launcher.extension_lock_timeout_s)
        port = free_port()
        self.learners = [
            self._start(s) for s in learner_specs(self.cfg, self.config_path, self.addresses, "127.0.0.1", port)
        ]

    def start_workers(self) -> None:
        for spec in worker_specs(self.cfg, self.config_path, self.addresses):
            self._start(spec)

    def start_evaluator(self) -> None:
        """The evaluation beside training (`eval.interval` > 0), if the recipe asks for one."""
        for spec in evaluator_specs(self.cfg, self.config_path, self.addresses):
            self._start(spec)

    def finish_evaluator(self, timeout_s: float, on_tick: Optional[Callable[[], None]] = None) -> Optional[int]:
        """After the learner ended: stop the rollout workers (nothing trains their groups any more)
        and give the evaluator up to `timeout_s` for the versions still due. Its exit code, or
        None when there is none or it was stopped at the deadline."""
        child = self.children.get("evaluator")
        if child is None:
            return None
        for name, worker in self.children.items():
            if name.startswith("rollout"):
                worker.stop(timeout_s=20)
        deadline = time.monotonic() + timeout_s
        while child.alive() and time.monotonic() < deadline:
            if on_tick:
                on_tick()
            time.sleep(self.poll_s)
        if child.alive():
            log.warning("evaluator: still busy after eval.drain_timeout_s=%.0f s; stopping it", timeout_s)
            child.stop(timeout_s=20)
            return None
        return child.returncode

    def supervise(self, on_tick: Optional[Callable[[], None]] = None) -> int:
        """Until rank 0 of the learner exits (its code is the run's); restart what may restart."""
        while True:
            codes = [c.returncode for c in self.learners]
            failed = [c for c in self.learners if c.returncode not in (None, 0)]
            if failed and not self._stopping and self._learner_may_restart(failed[0]):
                self._restart_learners(failed[0])
                continue
            if failed:
                log.error("%s", failed[0].failure("failed").args[0])
                return failed[0].returncode or 1  # neither None nor 0: the learner failed
            if codes and codes[0] is not None:
                return codes[0]
            now = time.monotonic()
            for name, child in list(self.children.items()):
                if not self.specs[name].restart or child.alive() or self._stopping:
                    continue
                due = self._restart_due.setdefault(name, now + min(30.0, 2.0**child.restarts - 1))
                if now >= due:
                    del self._restart_due[name]
                    self._restart(name, child)
            if on_tick:
                on_tick()
            time.sleep(self.poll_s)

    def _restart(self, name: str, child: Supervised) -> None:
        limit = self.cfg.launcher.max_restarts
        if not self.cfg.launcher.restart_failed or child.restarts >= limit:
            raise child.failure(
                f"died after {child.restarts} restart(s) (launcher.restart_failed="
                f"{self.cfg.launcher.restart_failed}, launcher.max_restarts={limit})"
            )
        log.warning("%s exited with %s; restart %d of at most %d", name, child.returncode, child.restarts + 1, limit)
        argv = None
        port = urlparse(child.url).port if child.url else None
        # Under the distributed publisher a restarted generator holds the start model: it waits
        # (paused) until the learner's publisher sees it back and pushes the weights it last
        # published, which also continues it. SGLang has no paused start: paused once ready.
        hold = name.startswith("generator") and self.cfg.learner.publish.kind.value == "distributed"
        embedded = self.cfg.generator.backend.value == "embedded"
        if name.startswith("generator"):  # same address, current weights
            path, version = latest_weights(self.cfg.run_dir)
            argv = generator_argv(self.config_path, path, port or 0, version)
            argv += ["--paused"] if hold and embedded else []
        elif port:  # a service comes back at the address its clients know
            argv = [*self.specs[name].argv, "--port", str(port)]
        restarts = child.restarts + 1
        new = self._start(self.specs[name], argv)
        new.restarts = restarts
        if hold and not embedded:
            pause_generator(new.url, self.generator_token())
        if hold:
            log.info("%s paused until the learner pushes its current weights", name)

    def generator_token(self) -> str:
        """The token the launcher's own calls to a generator carry."""
        return self.cfg.generator.token

    def _learner_may_restart(self, child: Supervised) -> bool:
        lc = self.cfg.launcher
        return lc.restart_learner and self.cfg.learner.resume.value == "auto" and child.restarts < lc.max_restarts

    def _restart_learners(self, failed: Supervised) -> None:
        """Every rank again (a torch.distributed job cannot lose one), on a fresh master port;
        the learner resumes from its last checkpoint and re-queues the batch it had not acked."""
        restarts = failed.restarts + 1
        log.warning(
            "%s exited with %s; restarting the learner (%d of at most %d), resuming from its last checkpoint",
            failed.name,
            failed.returncode,
            restarts,
            self.cfg.launcher.max_restarts,
        )
        for child in self.learners:
            child.stop(timeout_s=20)
        time.sleep(min(30.0, 2.0 ** (restarts - 1) - 1))
        self.start_learner()
        for child in self.learners:
            child.restarts = restarts

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
    from areal_mem.learner.publishers.disk import pushed_versions

    pushes = pushed_versions(os.path.join(run_dir, "weights"))
    if not pushes:
        return "", 0
    version, path = pushes[-1]
    return path, version


def pause_generator(url: str, token: str = "") -> None:
    """Hold a generator's requests until someone continues it (SGLang's /pause_generation)."""
    from areal_mem.rollout.generator.client import GeneratorClient

    async def pause() -> None:
        async with GeneratorClient([url], token=token) as client:
            await client.pause("abort")

    asyncio.run(pause())


def extension_lock_paths() -> List[str]:
    """The build locks of torch C++ extensions (DeepSpeed's shm op) this user's processes use."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions")
    return sorted(glob.glob(os.path.join(root, "*", "*", "lock")))  # <root>/py311_cpu/<op>/lock


def check_extension_locks(timeout_s: float) -> None:
    """A process killed while it compiled a torch extension leaves its `lock` file behind, and
    every later learner then waits on it forever. Wait up to `timeout_s` for a build in progress
    to finish; a lock still there is reported by name (deleting it is the user's call: it may
    belong to another user's build)."""
    deadline = time.monotonic() + timeout_s
    locks = extension_lock_paths()
    while locks and time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        locks = [p for p in locks if os.path.exists(p)]
    if locks:
        ages = ", ".join(f"{p} ({time.time() - os.path.getmtime(p):.0f} s old)" for p in locks if os.path.exists(p))
        raise RuntimeError(
            f"a torch extension build lock is still held after {timeout_s:.0f} s: {ages}. A process "
            f"killed while compiling leaves it behind and the learner would wait on it forever; if "
            f"no build is running, delete it (launcher.extension_lock_timeout_s sets the wait)"
        )
