"""The stream of questions one rollout worker runs, resumable after a restart.

The position is saved when a task is handed out: after a crash, groups that were
in flight are skipped for that epoch rather than run twice.

Worker i of N takes every N-th task of a seeded shuffle, epoch after epoch.
Group ids are derived from the (epoch, task) position, so a worker restarted
from its saved position regenerates the same ids and the buffer's duplicate
check makes a re-put harmless.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from typing import List, Tuple

from areal_mem.data import Task


@dataclass
class TaskCursor:
    tasks: List[Task]
    worker_id: int = 0
    num_workers: int = 1
    seed: int = 0
    state_path: str = ""  # where the position is saved; empty: not saved
    position: int = 0  # how many of this worker's tasks were handed out
    _order: Tuple[int, List[int]] = (-1, [])  # (epoch, shuffled indices), cached

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("the task list is empty: check rollout data (world train split)")
        if not 0 <= self.worker_id < self.num_workers:
            raise ValueError(f"worker_id {self.worker_id} is outside 0..{self.num_workers - 1}")
        if self.state_path and os.path.exists(self.state_path):
            with open(self.state_path, encoding="utf-8") as f:
                self.position = int(json.load(f)["position"])

    def next(self) -> Tuple[Task, str]:
        """The next task and its group id."""
        share = len(range(self.worker_id, len(self.tasks), self.num_workers))
        if share == 0:
            raise ValueError(
                f"worker {self.worker_id} of {self.num_workers} has no tasks ({len(self.tasks)} tasks in all)"
            )
        epoch, k = divmod(self.position, share)
        if self._order[0] != epoch:
            order = list(range(len(self.tasks)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._order = (epoch, order)
        task = self.tasks[self._order[1][self.worker_id + k * self.num_workers]]
        self.position += 1
        return task, f"{task.id}@e{epoch}"

    def save(self) -> None:
        if not self.state_path:
            return
        os.makedirs(os.path.dirname(self.state_path) or ".", exist_ok=True)
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"position": self.position}, f)
        os.replace(tmp, self.state_path)
