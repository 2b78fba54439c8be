"""DeepSpeed checkpoints with the loop's position (step, weight version, data consumed).

`<run_dir>/checkpoints/step<N>/` is DeepSpeed's own layout (model, optimiser,
scheduler states per rank) and `latest` names the newest; the loop's position
travels in the checkpoint's client state and is mirrored to `state.json` for people.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from typing import Optional

from .engine import LearnerEngine, list_checkpoint_tags


@dataclass
class TrainState:
    step: int = 0  # optimiser steps done
    version: int = 0  # weight pushes done (the generators' and the buffer's version)
    groups_consumed: int = 0  # data position: groups trained on (SFT: rows)
    epoch: int = 0  # SFT: passes over the data


class CheckpointManager:
    def __init__(self, run_dir: str, keep: int = 2):
        self.dir = os.path.join(run_dir, "checkpoints")
        self.keep = max(1, keep)

    def save(self, engine: LearnerEngine, state: TrainState) -> str:
        """Every rank saves its shard; rank 0 writes state.json and removes old checkpoints."""
        tag = engine.save_checkpoint(self.dir, {"train_state": asdict(state)})
        if engine.rank == 0:
            with open(os.path.join(self.dir, "state.json"), "w", encoding="utf-8") as f:
                json.dump(dict(asdict(state), tag=tag), f, indent=1)
            for old in list_checkpoint_tags(self.dir)[: -self.keep]:
                shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)
        return tag

    def load(self, engine: LearnerEngine) -> Optional[TrainState]:
        """The state of the latest checkpoint (weights and optimiser loaded), or None."""
        client = engine.load_checkpoint(self.dir)
        if client is None:
            return None
        return TrainState(**client["train_state"])
