"""The paper bench's records: one JSON file per finished arm and seed (`<arm>_s<seed>.json`,
its evaluations, costs and per-question answers), kept so that runs of different sessions or
machines merge without their run dirs."""

from __future__ import annotations

import json
import os
from typing import Dict

from .output import PROG


def same_world(a: dict, b: dict) -> bool:
    """Whether two records were run on the same world; a record kept before worlds were recorded
    (`world` absent) is taken at its word."""
    return a.get("world") is None or b.get("world") is None or a["world"] == b["world"]


def record_path(folder: str, arm: str, seed: int) -> str:
    return os.path.join(folder, f"{arm}_s{seed}.json")


def save_record(folder: str, rec: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(record_path(folder, rec["arm"], rec["seed"]), "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")


def load_records(folder: str) -> Dict[str, Dict[int, dict]]:
    """Every record kept in `folder`, by arm and seed; a record that does not read is named with
    its file, not skipped (a report missing a seed would look complete)."""
    out: Dict[str, Dict[int, dict]] = {}
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
            arm, seed = rec["arm"], int(rec["seed"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{PROG} paper: {path} is not a run record: {e!r}") from e
        if name != os.path.basename(record_path(folder, arm, seed)):
            raise SystemExit(f"{PROG} paper: {path} holds {arm} seed {seed}; its name says otherwise")
        out.setdefault(arm, {})[seed] = rec
    return out
