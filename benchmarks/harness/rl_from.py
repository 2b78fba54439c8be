"""A run that starts from another run's SFT: only its RL and final evaluation train anew.

`areal-mem train` skips every stage whose output is there, so a run dir given a finished run's
world, tiny model, index, oracle demonstrations, SFT model and start evaluation runs RL and the
final evaluation only. The paper bench's `--rl-from` uses it to ask whether more RL steps help
(200 against the 100 of the same SFT) at the cost of the RL alone: on 2 cores SFT is 70-80% of
an arm's time.

Files are hard-linked where the file system allows (no stage writes them again), else copied.
The source's stage times up to its start evaluation come along, so the new run's wall time is
what its whole recipe took, the shared SFT counted once in each run that uses it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import List

from .output import PROG

# what the stages up to the start evaluation leave in a run dir (`areal_mem.app.train`)
SHARED_DIRS = ("world", "model", "index", os.path.join("sft", "model"), os.path.join("eval", "start"))
SHARED_FILES = (os.path.join("sft", "demos.jsonl"), os.path.join("sft", "demos_stats.json"))
# the stages that run again in the new run: their times are not the source's
RL_STAGES = ("rl", "eval-final")


def start_from(source: str, run_dir: str) -> bool:
    """Give `run_dir` the stages of `source` up to its start evaluation; False (nothing done)
    when `run_dir` already has its SFT model (seeded before, or trained its own)."""
    if os.path.exists(os.path.join(run_dir, "sft", "model", "config.json")):
        return False
    missing = [p for p in _needed(source) if not os.path.exists(os.path.join(source, p))]
    if missing:
        raise SystemExit(
            f"{PROG}: --rl-from: {source} lacks {', '.join(missing)}: the run to start from must have "
            "finished its SFT and start evaluation"
        )
    for path in SHARED_DIRS:
        shutil.copytree(
            os.path.join(source, path), os.path.join(run_dir, path), copy_function=_link_or_copy, dirs_exist_ok=True
        )
    for path in SHARED_FILES:
        if os.path.exists(os.path.join(source, path)):
            _link_or_copy(os.path.join(source, path), os.path.join(run_dir, path))
    with open(os.path.join(source, "stage_s.json"), encoding="utf-8") as f:
        # a failed attempt of a stage is kept as `<stage>_failed` (`TrainPipeline.record_time`)
        stages = {k: v for k, v in json.load(f).items() if k.removesuffix("_failed") not in RL_STAGES}
    with open(os.path.join(run_dir, "stage_s.json"), "w", encoding="utf-8") as f:
        json.dump(stages, f)
    with open(os.path.join(run_dir, "rl_from.json"), "w", encoding="utf-8") as f:
        json.dump({"source": os.path.abspath(source)}, f)
    print(f"[bench] {run_dir}: world, model, index, demonstrations, SFT and start evaluation of {source}", flush=True)
    return True


def _needed(source: str) -> List[str]:
    return [
        *SHARED_DIRS,
        os.path.join("sft", "model", "config.json"),
        os.path.join("eval", "start", "summary.json"),
        SHARED_FILES[0],
        "stage_s.json",
    ]


def _link_or_copy(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.exists(dst):  # left by an earlier start that stopped before its SFT model: replaced
        os.remove(dst)
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)
