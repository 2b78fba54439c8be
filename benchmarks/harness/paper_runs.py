"""Reading one finished run of the paper bench (`<run-dir>/<arm>/s<seed>`): its evaluations,
learner costs, reward trend, SFT tokens, per-question answers, world and, for a run of
`--rl-from`, the run it started from; `arm_result` is the record of it."""

from __future__ import annotations

import json
import os
import statistics
from typing import Dict, Optional

import yaml

from areal_mem.jsonl import iter_jsonl

from .paired import read_results, read_typed
from .paper_stats import MULTI_HOP, NO_PAIR, answer_column, paired
from .rl_from import source_of
from .seeds import finished, read_summary

REWARD_WINDOW = 20  # RL steps: "still learning" is a higher mean training reward in the last 20 than in the 20 before


def read_eval(run_dir: str, tag: str) -> dict:
    """The summary of one greedy evaluation (`eval/<tag>/summary.json`)."""
    with open(os.path.join(run_dir, "eval", tag, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    return {
        "em": summary["em"],
        "f1": summary["f1"],
        "by_type": summary.get("by_type", {}),
        "searches": summary["mean_tool_calls"],
        "prefill_tokens": summary.get("mean_prefill_tokens"),
        "decode_tokens": summary.get("mean_decode_tokens"),  # absent from runs evaluated before it was recorded
        "peak_context": summary.get("peak_context_tokens"),
        "context_by_turn": [t["mean"] for t in summary["context_tokens_by_turn"]],
    }


def results_path(run_dir: str, tag: str) -> str:
    return os.path.join(run_dir, "eval", tag, "results.jsonl")


def learner_cost(run_dir: str) -> dict:
    """From the learner's `metrics.jsonl`: the SFT steps (the last one logged, so a multiple of
    `learner.log_interval`) and, medians over RL steps, tokens of the context rows per
    trajectory (every trajectory of the batch, also the zero-advantage groups the learner skips)
    and the learner's seconds per step without the wait for a batch (training and the push)."""
    tokens, step_s, sft_steps = [], [], 0
    for _, row in iter_jsonl(os.path.join(run_dir, "metrics.jsonl")):
        if row.get("kind") == "sft":
            sft_steps = max(sft_steps, int(row["step"]))
        if row.get("kind") == "train" and row.get("trajectories"):
            # mean tokens per context x mean contexts per trajectory = tokens per trajectory
            tokens.append(row["context_tokens"] * row["contexts"])
            step_s.append(row["step_s"] - row.get("wait_s", 0.0))
    return {
        "sft_steps": sft_steps,  # equal epochs are not equal training: the workflows' rows per question differ
        "steps": len(step_s),
        "tokens_per_traj": statistics.median(tokens) if tokens else None,
        "step_s": statistics.median(step_s) if step_s else None,
    }


def reward_trend(run_dir: str, window: int = REWARD_WINDOW) -> Optional[dict]:
    """Whether RL was still learning when it stopped: the mean training reward (each RL batch's
    mean, in the order `metrics.jsonl` logged them) of the `window` steps before the last
    `window` and of the last `window`; None for a run of fewer than twice `window` steps."""
    path = os.path.join(run_dir, "metrics.jsonl")
    rewards = [float(row["reward"]) for _, row in iter_jsonl(path) if row.get("kind") == "train" and "reward" in row]
    if len(rewards) < 2 * window:
        return None
    return {
        "window": window,
        "before": statistics.fmean(rewards[-2 * window : -window]),
        "last": statistics.fmean(rewards[-window:]),
    }


def epoch_tokens(run_dir: str) -> Optional[int]:
    """The context tokens of one epoch of the run's oracle demonstrations, as `areal-mem train`
    counted them when it wrote them (`sft/demos_stats.json`); counted from the file for a run
    written before the stats had them; None for a run without demonstrations."""
    sft = os.path.join(run_dir, "sft")
    if not os.path.exists(os.path.join(sft, "demos.jsonl")):
        return None
    stats = os.path.join(sft, "demos_stats.json")
    if os.path.exists(stats):
        with open(stats, encoding="utf-8") as f:
            tokens = json.load(f).get("tokens")
        if tokens is not None:
            return int(tokens)
    return sum(len(row["input_ids"]) for _, row in iter_jsonl(os.path.join(sft, "demos.jsonl")))


def sft_tokens(run_dir: str) -> Optional[int]:
    """The context tokens the run's SFT trained on: its oracle demonstrations' tokens times
    `learner.sft.epochs` (what "trained alike" equalises between the workflows); None for a run
    without demonstrations."""
    tokens = epoch_tokens(run_dir)
    if tokens is None:
        return None
    with open(os.path.join(run_dir, "train_config.yaml"), encoding="utf-8") as f:
        epochs = int(yaml.safe_load(f)["learner"]["sft"]["epochs"])
    return epochs * tokens


def answers(run_dir: str) -> Optional[Dict[str, list]]:
    """{question id: [type, EM after SFT, EM after RL]}, what every sign test of the report pairs;
    None when the two evaluations did not cover the same questions (then there is no pairing)."""
    sft, rl = read_typed(results_path(run_dir, "start")), read_typed(results_path(run_dir, "final"))
    if sft.keys() != rl.keys():
        return None
    return {q: [t, em, rl[q][1]] for q, (t, em) in sft.items()}


def against_source(run_dir: str) -> Optional[dict]:
    """For a run started from another run's SFT (`--rl-from`): that run's SFT and RL steps, evaluation
    after RL and reward trend, and this run's answers after RL paired with its answers after RL
    (fixed: right here, wrong there), over all questions and over the multi-hop ones: what the
    RL steps added beyond the source's; None for a run that trained its own SFT. A source that
    has not finished its RL (or is gone) is named, with nothing to compare."""
    source = source_of(run_dir)
    if source is None:
        return None
    # its SFT steps were logged there (a run dir that is gone has none to give)
    cost = learner_cost(source) if os.path.exists(os.path.join(source, "metrics.jsonl")) else None
    sft_steps = cost["sft_steps"] if cost else None
    if cost is None or not finished(source):
        print(f"[bench paper] {run_dir} started from {source}, which has no finished RL: nothing to compare")
        nothing = {"vs_source": dict(NO_PAIR), "vs_source_" + MULTI_HOP: dict(NO_PAIR)}
        return {"source": source, "sft_steps": sft_steps, "steps": None, "rl": None, "reward": None, **nothing}
    mine, theirs = results_path(run_dir, "final"), results_path(source, "final")
    return {
        "source": source,
        "sft_steps": sft_steps,
        "steps": cost["steps"],
        "rl": read_eval(source, "final"),
        "reward": reward_trend(source),
        "vs_source": paired(read_results(theirs), read_results(mine)),
        "vs_source_" + MULTI_HOP: paired(read_results(theirs, MULTI_HOP), read_results(mine, MULTI_HOP)),
    }


def world_sha256(run_dir: str, summary: dict) -> Optional[Dict[str, str]]:
    """The sha256 of the run's world files (corpus, train, dev, test): the question ids are
    positions in a split (`test_17`), so two runs' answers pair only where their worlds are the
    same bytes. As `areal-mem train` recorded it (`world_sha256`); for a run trained before it
    did, the manifest of the world its resolved config names (a relative `world.dir` tried from
    here, then as `<run_dir>/world`); None, with a warning, when neither reads."""
    if summary.get("world_sha256"):
        return summary["world_sha256"]
    try:
        with open(os.path.join(run_dir, "train_config.yaml"), encoding="utf-8") as f:
            world_dir = yaml.safe_load(f)["world"]["dir"]
        for folder in (world_dir, os.path.join(run_dir, "world")):
            path = os.path.join(folder, "manifest.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    return json.load(f)["sha256"]
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as e:
        print(f"[bench paper] {run_dir}: its world is not known ({e!r}); it is paired at its word")
        return None
    print(f"[bench paper] {run_dir}: no manifest of its world {world_dir}; it is paired at its word")
    return None


def arm_result(run_dir: str, arm: str, seed: int) -> dict:
    summary = read_summary(run_dir)
    ans = answers(run_dir)
    learner = {**learner_cost(run_dir), "sft_tokens": sft_tokens(run_dir)}
    source = against_source(run_dir)
    if source is not None and source["sft_steps"] and not learner["sft_steps"]:  # its SFT was the source's
        learner["sft_steps"] = source["sft_steps"]
    return {
        "arm": arm,
        "seed": seed,
        "run_dir": run_dir,
        "world": world_sha256(run_dir, summary),
        "stage_s": summary["stage_s"],
        "wall_s": summary["wall_s"],
        "learner": learner,
        "reward": reward_trend(run_dir),
        "rl_from": source,
        "sft": read_eval(run_dir, "start"),
        "rl": read_eval(run_dir, "final"),
        "rl_vs_sft": paired(answer_column(ans, 1), answer_column(ans, 2)) if ans else dict(NO_PAIR),
        "rl_vs_sft_" + MULTI_HOP: paired(answer_column(ans, 1, MULTI_HOP), answer_column(ans, 2, MULTI_HOP))
        if ans
        else dict(NO_PAIR),
        "answers": ans,
    }
