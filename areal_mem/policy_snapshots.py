"""The hand-off of policy versions from the learner to the evaluator that runs beside training.

Every `eval.interval` versions the learner publishes one folder `<run_dir>/eval_during/v000012/`:
the Hugging Face weights of that version (placement `own`: the evaluator's own generator loads
them) or only its `version.json` (placement `shared`: the training generators serve that version
already). A folder appears whole, written under a temporary name and then renamed, so the
evaluator never loads a half-written one; `learner_done` says that no more will come. Files,
not a socket: the learner and the evaluator may restart independently and find their place again.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Callable, List, Tuple

ROOT = "eval_during"
DONE = "learner_done"
INFO = "version.json"
CURVE = "curve.jsonl"  # the evaluator's results, one line per evaluated version


def root(run_dir: str) -> str:
    return os.path.join(run_dir, ROOT)


def snapshot_path(run_dir: str, version: int) -> str:
    return os.path.join(root(run_dir), f"v{version:06d}")


def publish(run_dir: str, version: int, step: int, write_weights: Callable[[str], object] | None) -> str:
    """Write version `version`'s folder (weights through `write_weights(folder)`, if given), then
    make it visible at once. Returns the folder."""
    final = snapshot_path(run_dir, version)
    tmp = final + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if write_weights is not None:
        write_weights(tmp)
    with open(os.path.join(tmp, INFO), "w", encoding="utf-8") as f:
        json.dump({"version": version, "step": step, "time": time.time(), "weights": write_weights is not None}, f)
    shutil.rmtree(final, ignore_errors=True)  # a restarted learner publishing a version again
    os.replace(tmp, final)
    return final


def pending(run_dir: str) -> List[Tuple[int, str]]:
    """(version, folder) of the published snapshots not yet taken by the evaluator, oldest first."""
    base = root(run_dir)
    if not os.path.isdir(base):
        return []
    found = []
    for name in os.listdir(base):
        path = os.path.join(base, name)
        if name[:1] == "v" and name[1:].isdigit() and os.path.exists(os.path.join(path, INFO)):
            found.append((int(name[1:]), path))
    return sorted(found)


def read_info(folder: str) -> dict:
    with open(os.path.join(folder, INFO), encoding="utf-8") as f:
        return json.load(f)


def mark_done(run_dir: str) -> None:
    os.makedirs(root(run_dir), exist_ok=True)
    with open(os.path.join(root(run_dir), DONE), "w", encoding="utf-8") as f:
        f.write(f"{time.time()}\n")


def learner_done(run_dir: str) -> bool:
    return os.path.exists(os.path.join(root(run_dir), DONE))


def curve_path(run_dir: str) -> str:
    return os.path.join(root(run_dir), CURVE)


def read_curve(run_dir: str) -> List[dict]:
    """The evaluated versions so far (a line still being written is left out)."""
    path = curve_path(run_dir)
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                rows.append(json.loads(line))
    return rows
