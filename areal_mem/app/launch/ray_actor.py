"""One process of a run on a Ray node: an actor that owns a `ChildProcess` there.

The actor starts the spec's `areal-mem` command with the node's own Python, waits
for a service's ready file (a path on the node), answers liveness polls and stops
the child's process group. The command line never carries a token: tokens reach
the child only through `env`, which arrives as a method argument.
"""

from __future__ import annotations

import atexit
from typing import Dict, List, Optional

import ray

from areal_mem.net import free_port
from areal_mem.process import ChildProcess, cli_command, ready_file_path, wait_ready


class ProcessActor:
    def __init__(self, name: str, log_path: str) -> None:
        self.name, self.log_path = name, log_path
        self.child: Optional[ChildProcess] = None
        atexit.register(self.stop)  # a graceful actor exit must not orphan the child

    def node_ip(self) -> str:
        return ray.util.get_node_ip_address()

    def free_port(self) -> int:
        """A port free on this node (for MASTER_PORT of the learner ranks)."""
        return free_port("0.0.0.0")

    def start(self, argv: List[str], env: Dict[str, str], service: bool, timeout_s: float) -> str:
        """Start `areal-mem <argv>`; for a service, block until it wrote its URL and return it."""
        self.stop()
        ready = ready_file_path(self.name) if service else ""
        cmd = cli_command(*argv, *(["--ready-file", ready] if ready else []))
        self.child = ChildProcess(self.name, cmd, self.log_path, dict(env)).start()
        return wait_ready(self.child, ready, timeout_s) if ready else ""

    def poll(self) -> Optional[int]:
        """The child's exit code, None while it runs."""
        return None if self.child is None else self.child.returncode

    def pid(self) -> int:
        return self.child.pid if self.child else 0

    def signal_group(self, sig: int) -> None:
        if self.child is not None:
            self.child.signal_group(sig)

    def stop(self, timeout_s: float = 15.0) -> Optional[int]:
        return None if self.child is None else self.child.stop(timeout_s)

    def log_tail(self, n: int = 4000) -> str:
        return "" if self.child is None else self.child.log_tail(n)
