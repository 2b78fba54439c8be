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
from typing import Any, Dict, List, Optional, Sequence

import yaml

from .output import PROG

SFT_MODEL = os.path.join("sft", "model")
SOURCE_FILE = "rl_from.json"  # in the new run: which run it started from
# what the stages up to the start evaluation leave in a run dir (`areal_mem.app.train`); the SFT
# model last, renamed into place whole: its config.json is what marks a run dir as started
SHARED_DIRS = ("world", "model", "index", os.path.join("eval", "start"))
SHARED_FILES = (os.path.join("sft", "demos.jsonl"), os.path.join("sft", "demos_stats.json"))
# the stages that run again in the new run: their times are not the source's
RL_STAGES = ("rl", "eval-final")
# what the SFT and the start evaluation depend on: a run that differs in one would report the
# source's as its own (its train_config.yaml would misstate the SFT it started from)
START_KEYS = (
    "seed",
    "world",
    "model",
    "learner.sft",
    "eval.data",
    "eval.method",
    "eval.max_turns",
    "eval.limit",
    "eval.temperature",
    "rollout.workflow",
    "rollout.workflow_args",
    "rollout.tools",
    "rollout.tool_args",
    "rollout.prompt_style",
    "rollout.prompt_file",
    "rollout.limits",
    "rollout.top_n",
)
NOT_COMPARED = ("learner.sft.threads", "learner.sft.out_dir")  # neither changes what SFT learns


def start_from(source: str, run_dir: str) -> bool:
    """Give `run_dir` the stages of `source` up to its start evaluation; False (nothing done)
    when `run_dir` already has its SFT model (started before, or trained its own)."""
    if os.path.exists(os.path.join(run_dir, SFT_MODEL, "config.json")):
        return False
    missing = [p for p in _needed(source) if not os.path.exists(os.path.join(source, p))]
    if missing:
        raise SystemExit(
            f"{PROG}: --rl-from: {source} lacks {', '.join(missing)}: the run to start from must have "
            "finished its SFT and start evaluation"
        )
    for path in SHARED_DIRS:
        _link_tree(os.path.join(source, path), os.path.join(run_dir, path))
    for path in SHARED_FILES:
        if os.path.exists(os.path.join(source, path)):
            _link_or_copy(os.path.join(source, path), os.path.join(run_dir, path))
    with open(os.path.join(source, "stage_s.json"), encoding="utf-8") as f:
        # a failed attempt of a stage is kept as `<stage>_failed` (`TrainPipeline.record_time`)
        stages = {k: v for k, v in json.load(f).items() if k.removesuffix("_failed") not in RL_STAGES}
    with open(os.path.join(run_dir, "stage_s.json"), "w", encoding="utf-8") as f:
        json.dump(stages, f)
    with open(os.path.join(run_dir, SOURCE_FILE), "w", encoding="utf-8") as f:
        json.dump({"source": os.path.abspath(source)}, f)
    part = os.path.join(run_dir, SFT_MODEL + ".part")  # an interrupted start is begun again
    shutil.rmtree(part, ignore_errors=True)
    _link_tree(os.path.join(source, SFT_MODEL), part)
    os.rename(part, os.path.join(run_dir, SFT_MODEL))
    print(f"[bench] {run_dir}: world, model, index, demonstrations, SFT and start evaluation of {source}", flush=True)
    return True


def source_of(run_dir: str) -> Optional[str]:
    """The run dir `run_dir` started from (`start_from`), None for a run that trained its own SFT."""
    path = os.path.join(run_dir, SOURCE_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return str(json.load(f)["source"])


def check_same_start(source: str, run_config: Dict[str, Any]) -> None:
    """Refuse a run whose resolved config (`run_config`, as `areal-mem train` writes it) differs
    from the source's `train_config.yaml` in what its SFT and start evaluation depend on
    (`START_KEYS`; paths under either run dir compared relative to it, keys one of them lacks
    not compared: a config written before the key existed)."""
    with open(os.path.join(source, "train_config.yaml"), encoding="utf-8") as f:
        old = yaml.safe_load(f)
    differ = []
    for key in START_KEYS:
        a = _flat(_under(old, key), key, str(old.get("run_dir", "")))
        b = _flat(_under(run_config, key), key, str(run_config.get("run_dir", "")))
        differ += [f"{k}: {a[k]!r} there, {b[k]!r} here" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]
    if differ:
        raise SystemExit(
            f"{PROG}: --rl-from {source}: the run's SFT and start evaluation would not be its own: " + "; ".join(differ)
        )


def _under(config: Dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        if not isinstance(config, dict) or part not in config:
            return None
        config = config[part]
    return config


def _flat(value: Any, prefix: str, run_dir: str) -> Dict[str, Any]:
    if isinstance(value, dict):
        out: Dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}", run_dir))
        return out
    if prefix in NOT_COMPARED or value is None:
        return {}
    if isinstance(value, str) and run_dir and value.startswith(run_dir):
        value = "<run_dir>" + value[len(run_dir) :]
    return {prefix: value}


def _needed(source: str) -> List[str]:
    return [
        *SHARED_DIRS,
        os.path.join(SFT_MODEL, "config.json"),
        os.path.join("eval", "start", "summary.json"),
        SHARED_FILES[0],
        "stage_s.json",
        "train_config.yaml",
    ]


def _link_tree(src: str, dst: str) -> None:
    shutil.copytree(src, dst, copy_function=_link_or_copy, dirs_exist_ok=True)


def _link_or_copy(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.exists(dst):  # left by a start that stopped before its SFT model: replaced
        os.remove(dst)
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def run_config(configs: Sequence[str], overrides: Sequence[str]) -> Dict[str, Any]:
    """The resolved config `areal-mem train` would write for these files and overrides."""
    from areal_mem.config import load_run, to_yaml

    return yaml.safe_load(to_yaml(load_run(list(configs), list(overrides))))
