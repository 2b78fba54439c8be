"""`python -m benchmarks paper`: MemSearcher against ReAct, trained alike, on multi-hop questions.

The paper's comparison in miniature. For each seed and each workflow (an arm) the whole recipe
(`areal-mem train`: world, tiny model, index, the workflow's own oracle demonstrations, SFT,
asynchronous RL, greedy evaluation of the SFT and the RL model on the held-out test split) runs
from its own run dir, `<run-dir>/<arm>/s<seed>`. The arms differ only in `rollout.workflow`,
`eval.method` and ReAct's SFT epochs (for MemSearcher's SFT tokens: `ARM_SETS` on the recipe's
world, `equal_sft_epochs` per horizon and seed with `--hops`): the same world and base
model (one seed builds both), the same SFT recipe, RL steps, groups and token limits. A
finished arm is read, not rerun, so the bench can run one seed per invocation and merge. With
`--records DIR` each finished arm also leaves a record there (its evaluations, costs and the
per-question answers the sign tests pair, tens of KB), and every record found there is reported:
seeds run in different sessions or on different machines merge without their run dirs. With
`--rl-from DIR` each run starts from the SFT of the same arm and seed under DIR (`rl_from`): more
RL steps on the same warm start, at the cost of the RL alone.

The report: EM and F1 by question type after SFT and after RL, for both workflows and every
seed; searches per question; generator prefill tokens per question (the prompts of every
generation request, summed), decode tokens (generated) and learner tokens per trajectory; SFT
tokens; peak and per-turn context;
learner seconds per step; the training reward of the last 20 RL steps against the 20 before
(whether RL was still learning); paired sign tests over the same questions (RL against SFT per
workflow, MemSearcher against ReAct after RL, and for a run of `--rl-from` its RL against its
source's); and the targets of the recipe, met or not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import yaml

from areal_mem.jsonl import iter_jsonl

from .arms import DEFAULT_CONFIG, parse_ints
from .output import PROG, command_line, markdown_table, new_figure, save_figure, write_report
from .paired import fixed_broken, pooled, read_results, read_typed, sign_test_p
from .rl_from import check_same_start, run_config, source_of, start_from
from .seeds import finished, finished_seeds, read_summary, train_run

HELP = "MemSearcher vs ReAct trained alike on multi-hop questions: EM by type, cost, sign tests (per seed)"
NEEDS = ("matplotlib",)
PAPER_CONFIG = os.path.join(os.path.dirname(DEFAULT_CONFIG), "paper_cpu.yaml")
ARMS = ("memsearcher", "react")
MULTI_HOP = "bridge"  # the question type the targets are about
# Equal SFT training, not equal epochs: ReAct's oracle writes one context row per question,
# MemSearcher's about three (22,820 rows of 5.65M tokens for 8,000 questions, seed 0; ReAct's
# 2.68M), so ReAct's 6 epochs are about MemSearcher's 3 in tokens (16M against 17M) and, with
# batches of a token budget, in steps
ARM_SETS = ("react:learner.sft.epochs=6",)
REWARD_WINDOW = 20  # RL steps: "still learning" is a higher mean training reward in the last 20 than in the 20 before


def horizon_overrides(hops: int) -> List[str]:
    """The recipe at a horizon of `hops` hops (`--hops`, and `python -m benchmarks cost`): every
    bridge question has that many hops (`world.hops`), and the limits leave the oracle's plan
    room: a search a hop, the answer and one turn spare (the recipe's 4 turns at 2 hops), and
    48 tokens a hop for a generation and for the memory, which keeps a fact a hop (at least the
    recipe's 96 and 128: at 2 hops these are the recipe's own values). At 6 hops the oracle's
    memory rewrite is about 140 tokens, above the recipe's 96."""
    turns = hops + 2
    return [
        f"world.hops={hops}",
        f"rollout.limits.max_turns={turns}",
        f"eval.max_turns={turns}",
        f"rollout.limits.max_new_tokens={max(96, 48 * hops)}",
        f"rollout.limits.max_memory_tokens={max(128, 48 * hops)}",
    ]


@dataclass(frozen=True)
class PaperTargets:
    """What the report judges (the `--target-*` options, these their defaults), on the
    `MULTI_HOP` questions of every seed."""

    rl_gain: float = 2.0  # MemSearcher's EM after RL over after SFT, at least (and above it)
    prefill_ratio: float = 0.5  # MemSearcher's prefill tokens over ReAct's after RL, at most (at ReAct's EM or above)


@dataclass
class Target:
    target: str
    met: bool
    numbers: str  # what it was decided on


def add_recipe_option(parser: argparse.ArgumentParser) -> None:
    """`--config`, the layered recipe files (`recipe_files`), for this bench and `cost`."""
    parser.add_argument(
        "--config",
        action="append",
        default=None,
        help="recipe file, repeat to layer (default configs/debug_cpu.yaml + configs/paper_cpu.yaml)",
    )


def recipe_files(args: argparse.Namespace) -> List[str]:
    return args.config or [DEFAULT_CONFIG, PAPER_CONFIG]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_recipe_option(parser)
    parser.add_argument("--run-dir", default="runs/paper", help="<arm>/s<seed> run dirs and the report")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument(
        "--arms",
        default=",".join(ARMS),
        help="comma-separated workflows to train (the report has every arm found under --run-dir and in --records)",
    )
    parser.add_argument("--report-dir", default="", help="also write the report here (e.g. docs/reports)")
    parser.add_argument("--name", default="paper", help="report file name")
    parser.add_argument("--collect-only", action="store_true", help="report the finished runs; train none")
    parser.add_argument(
        "--records",
        default="",
        help="keep each finished run's record (<arm>_s<seed>.json) here and report every record found here too "
        "(e.g. docs/reports/paper_runs): runs merge without their run dirs",
    )
    parser.add_argument(
        "--arm-set",
        action="append",
        default=None,
        metavar="ARM:key.sub=value",
        help=f"override for one arm only, repeatable; any given replace the default, ReAct's SFT epochs for "
        f"MemSearcher's SFT tokens: {' '.join(ARM_SETS)} on the recipe's world, and with --hops counted on each "
        "horizon's and seed's oracle demonstrations",
    )
    d = PaperTargets()
    parser.add_argument(
        "--target-rl-gain",
        type=float,
        default=d.rl_gain,
        help=f"MemSearcher's {MULTI_HOP} EM after RL over after SFT, at least, on every seed (default %(default)s)",
    )
    parser.add_argument(
        "--target-prefill-ratio",
        type=float,
        default=d.prefill_ratio,
        help=f"MemSearcher's prefill tokens per {MULTI_HOP} question over ReAct's after RL, at most (default %(default)s)",
    )
    parser.add_argument(
        "--hops",
        default="",
        help="comma-separated horizons: every bridge question of the world has this many hops (world.hops, with "
        "the turn and token limits of horizon_overrides); runs, records and reports go under h<hops>/ and a table "
        "compares the horizons. Default: the recipe's world, in --run-dir itself",
    )
    parser.add_argument(
        "--rl-from",
        default="",
        metavar="DIR",
        help="start each run from the same arm and seed's run under DIR (DIR/h<hops> with --hops): its world, "
        "model, index, demonstrations, SFT model and start evaluation are linked in, and only RL and the final "
        "evaluation run (e.g. learner.steps=200 against DIR's 100 steps of the same SFT)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override for every run")


# what the bench itself sets per arm and run: an override of these would make an arm another arm
# (or another seed's run) under its name
BENCH_KEYS = ("rollout.workflow", "eval.method", "seed", "run_dir")
# a run's own outputs, under its run dir by default: one path given for every arm or seed would
# make a later run find an earlier one's SFT model or evaluation there and skip its own
RUN_OUTPUTS = ("learner.sft.out_dir", "eval.out_dir")


def arm_overrides(arms: List[str], common: List[str], arm_sets: List[str]) -> Dict[str, List[str]]:
    """Each arm's overrides: the workflow and its evaluation, `common`, then its own `--arm-set`s
    (later wins, so an arm's own beat the common ones). The keys the bench sets (`BENCH_KEYS`)
    and the runs' own outputs (`RUN_OUTPUTS`) are refused by name, in either."""
    for item in [*common, *(x.partition(":")[2] for x in arm_sets)]:
        # as OmegaConf reads a dotlist key: `rollout[workflow]` is `rollout.workflow`
        key = re.sub(r"\[([^\]]*)\]", r".\1", item.partition("=")[0]).strip().lstrip("+~")
        if key in BENCH_KEYS:
            raise SystemExit(
                f"{PROG} paper: override {item!r}: {key} is the bench's to set per arm and run "
                "(--arms, --seeds, --run-dir)"
            )
        if key in RUN_OUTPUTS:
            raise SystemExit(
                f"{PROG} paper: override {item!r}: {key} is each run's own output (under "
                "--run-dir/<arm>/s<seed>); one path for several runs would have them read each other's"
            )
    out = {arm: [f"rollout.workflow={arm}", f"eval.method={arm}", *common] for arm in arms}
    for item in arm_sets:
        arm, sep, override = item.partition(":")
        if not sep or "=" not in override:
            raise SystemExit(f"{PROG} paper: --arm-set {item!r} must be ARM:key.sub=value")
        if arm not in out:
            raise SystemExit(f"{PROG} paper: --arm-set {item!r} names arm {arm!r}; --arms are {arms}")
        out[arm].append(override)
    return out


# ---- reading one finished run ----
def _eval(run_dir: str, tag: str) -> dict:
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


def demo_tokens(configs: List[str], run_dir: str, seed: int, overrides: List[str]) -> Tuple[int, int]:
    """The context tokens of one epoch of a run's oracle demonstrations and its SFT epochs. The
    demonstrations are written first where absent (world, model and index too) exactly as
    `areal-mem train` writes them, which then finds and reads them: counting costs the arm
    nothing it would not do anyway."""
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import load_run

    cfg = load_run(configs, [f"run_dir={run_dir}", f"seed={seed}", *overrides])
    pipe = TrainPipeline(cfg, evaluate=False)
    pipe.prepare()
    pipe.demonstrations()
    tokens = epoch_tokens(run_dir)
    assert tokens is not None  # just written
    return tokens, cfg.learner.sft.epochs


def equal_sft_epochs(configs: List[str], root: str, seed: int, per_arm: Dict[str, List[str]]) -> int:
    """ReAct's SFT epochs for MemSearcher's SFT tokens on the seed's world (the nearest whole
    epoch): the oracles write one context row per question for ReAct and one per turn for
    MemSearcher, and how many more depends on the horizon (2 hops: 5.65M tokens an epoch
    against 2.68M, 6 epochs for MemSearcher's 3; 6 hops: 9.50M against 3.58M, 8 epochs)."""
    (ms, epochs), (react, _) = (
        demo_tokens(configs, os.path.join(root, arm, f"s{seed}"), seed, per_arm[arm]) for arm in ARMS
    )
    n = max(1, round(epochs * ms / react))
    print(
        f"[bench paper] seed {seed}: SFT tokens an epoch, memsearcher {ms:,}, react {react:,}: react trains "
        f"{n} epochs ({n * react:,} tokens) for memsearcher's {epochs} ({epochs * ms:,})",
        flush=True,
    )
    return n


NO_PAIR = {"fixed": None, "broken": None, "p": None}


def answers(run_dir: str) -> Optional[Dict[str, list]]:
    """{question id: [type, EM after SFT, EM after RL]}, what every sign test of the report pairs;
    None when the two evaluations did not cover the same questions (then there is no pairing)."""
    sft, rl = read_typed(results_path(run_dir, "start")), read_typed(results_path(run_dir, "final"))
    if sft.keys() != rl.keys():
        return None
    return {q: [t, em, rl[q][1]] for q, (t, em) in sft.items()}


def _ems(ans: Dict[str, list], column: int, qtype: Optional[str] = None) -> Dict[str, float]:
    """One column of `answers` (1: after SFT, 2: after RL), only `qtype`'s questions if given."""
    return {q: a[column] for q, a in ans.items() if qtype is None or a[0] == qtype}


def paired(before: Dict[str, float], after: Dict[str, float]) -> dict:
    """Questions right only in `after` (fixed) and only in `before` (broken), with the sign test."""
    try:
        fixed, broken = fixed_broken(before, after)
    except ValueError:
        return dict(NO_PAIR)
    return {"fixed": fixed, "broken": broken, "p": sign_test_p(fixed, broken)}


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
        "rl": _eval(source, "final"),
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


def same_world(a: dict, b: dict) -> bool:
    """Whether two records were run on the same world; a record kept before worlds were recorded
    (`world` absent) is taken at its word."""
    return a.get("world") is None or b.get("world") is None or a["world"] == b["world"]


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
        "sft": _eval(run_dir, "start"),
        "rl": _eval(run_dir, "final"),
        "rl_vs_sft": paired(_ems(ans, 1), _ems(ans, 2)) if ans else dict(NO_PAIR),
        "rl_vs_sft_" + MULTI_HOP: paired(_ems(ans, 1, MULTI_HOP), _ems(ans, 2, MULTI_HOP)) if ans else dict(NO_PAIR),
        "answers": ans,
    }


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


# ---- the report ----
def _type(ev: dict, qtype: str, key: str, default=0.0):
    return ev["by_type"].get(qtype, {}).get(key, default)


def _times(x: float, two: str) -> str:
    return two if x == 2 else f"multiplies by at least {x:g}"


def targets(
    results: Dict[str, Dict[int, dict]], seeds: List[int], thresholds: PaperTargets = PaperTargets()
) -> List[dict]:
    """The recipe's targets, each met or not, with the numbers it was decided on. A seed missing
    from an arm fails a target that asks for every seed."""
    gain, ratio_max = thresholds.rl_gain, thresholds.prefill_ratio
    out: List[Target] = []
    ms, react = results.get("memsearcher", {}), results.get("react", {})
    seeds = [s for s in seeds if s in ms or s in react]  # another arm's seeds are not these targets' to ask for
    rows = [(s, _type(ms[s]["sft"], MULTI_HOP, "em"), _type(ms[s]["rl"], MULTI_HOP, "em")) for s in seeds if s in ms]
    if rows:
        out.append(
            Target(
                f"MemSearcher: RL {_times(gain, 'at least doubles')} the held-out {MULTI_HOP} EM of SFT on every seed "
                "(and raises it: 0% -> 0% fails)",
                len(rows) == len(seeds) and all(rl > sft and rl >= gain * sft for _, sft, rl in rows),
                ", ".join(f"seed {s}: {sft:.1f}% -> {rl:.1f}%" for s, sft, rl in rows),
            )
        )
    both = [s for s in seeds if s in ms and s in react]
    if both:
        parts, met = [], len(both) == len(seeds)
        for s in both:
            if not same_world(ms[s], react[s]):
                met = False
                parts.append(f"seed {s}: the two arms ran on different worlds, not compared")
                continue
            m, r = ms[s]["rl"], react[s]["rl"]
            m_em, r_em = _type(m, MULTI_HOP, "em"), _type(r, MULTI_HOP, "em")
            m_pre, r_pre = (
                _type(m, MULTI_HOP, "mean_prefill_tokens", None),
                _type(r, MULTI_HOP, "mean_prefill_tokens", None),
            )
            ratio = m_pre / r_pre if m_pre is not None and r_pre else None
            met = met and ratio is not None and m_em >= r_em and ratio <= ratio_max
            shown = f"{ratio:.2f}x ReAct's" if ratio is not None else "not recorded"
            parts.append(f"seed {s}: {MULTI_HOP} EM {m_em:.1f}% vs {r_em:.1f}%, prefill {shown}")
        share = "half" if ratio_max == 0.5 else f"{ratio_max:g}x"
        out.append(
            Target(
                f"after RL, MemSearcher's {MULTI_HOP} EM at least ReAct's at no more than {share} its prefill "
                f"tokens per {MULTI_HOP} question, on every seed",
                met,
                "; ".join(parts),
            )
        )
    return [asdict(t) for t in out]


def versus(a: dict, b: dict) -> dict:
    """After RL, `a` against `b` over the same questions: wins (a right, b wrong), losses, p; no
    pairing when either run's record lacks its answers or the two ran on different worlds."""
    out = {}
    for key, qtype in (("all", None), (MULTI_HOP, MULTI_HOP)):
        if a.get("answers") and b.get("answers") and same_world(a, b):
            r = paired(_ems(b["answers"], 2, qtype), _ems(a["answers"], 2, qtype))
        else:
            r = NO_PAIR
        out[key] = {"wins": r["fixed"], "losses": r["broken"], "p": r["p"]}
    return out


def report(
    results: Dict[str, Dict[int, dict]], seeds: List[int], command: str, thresholds: PaperTargets = PaperTargets()
) -> dict:
    arms = {}
    for arm, by_seed in results.items():
        # the answers stay in the records: the report's JSON has what they were used for
        runs = [{k: v for k, v in by_seed[s].items() if k != "answers"} for s in seeds if s in by_seed]
        pairs = [(r["rl_vs_sft"]["fixed"], r["rl_vs_sft"]["broken"]) for r in runs if r["rl_vs_sft"]["p"] is not None]
        arms[arm] = {"runs": runs, "pooled_rl_vs_sft": dict(zip(("fixed", "broken", "p"), pooled(pairs)))}
        sourced = [r["rl_from"] for r in runs if r.get("rl_from") and r["rl_from"]["vs_source"]["p"] is not None]
        if sourced:  # runs of --rl-from: what their RL added over their sources', over the seeds
            arms[arm]["pooled_vs_source"] = {
                key: dict(zip(("fixed", "broken", "p"), pooled([(s[key]["fixed"], s[key]["broken"]) for s in sourced])))
                for key in ("vs_source", "vs_source_" + MULTI_HOP)
            }
    head = []
    if "memsearcher" in results and "react" in results:
        for s in seeds:
            if s in results["memsearcher"] and s in results["react"]:
                head.append({"seed": s, **versus(results["memsearcher"][s], results["react"][s])})
    return {
        "command": command,
        "seeds": seeds,
        "arms": arms,
        "memsearcher_vs_react": head,
        # the seeds are independent runs on independent worlds: their wins and losses add up
        "memsearcher_vs_react_pooled": {
            key: dict(
                zip(
                    ("wins", "losses", "p"),
                    pooled([(v[key]["wins"], v[key]["losses"]) for v in head if v[key]["p"] is not None]),
                )
            )
            for key in ("all", MULTI_HOP)
        },
        "thresholds": asdict(thresholds),
        "targets": targets(results, seeds, thresholds),
    }


def _types(rep: dict) -> List[str]:
    return sorted({t for a in rep["arms"].values() for r in a["runs"] for t in r["rl"]["by_type"]})


def _pair(p: dict) -> str:
    return "n/a" if p["p"] is None else f"{p['fixed']} / {p['broken']} (p {p['p']:.2g})"


def _num(x, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def _trend(t: Optional[dict]) -> str:
    return "-" if t is None else f"{t['before']:.3f} -> {t['last']:.3f}"


def _source_row(arm: str, r: dict) -> list:
    """One row of the comparison with the run `r` started from (`against_source`)."""
    src, rl = r["rl_from"], r["rl"]
    if src["rl"] is None:
        return [arm, r["seed"], f"- -> {r['learner']['steps']}", "-", "-", "n/a", "n/a", f"({src['source']}: no RL)"]
    return [
        arm,
        r["seed"],
        f"{src['steps']} -> {r['learner']['steps']}",
        f"{_type(src['rl'], MULTI_HOP, 'em'):.1f} -> **{_type(rl, MULTI_HOP, 'em'):.1f}**",
        f"{src['rl']['em']:.1f} -> **{rl['em']:.1f}**",
        _pair(src["vs_source"]),
        _pair(src["vs_source_" + MULTI_HOP]),
        _trend(src["reward"]),
    ]


def markdown(rep: dict) -> str:
    types = _types(rep)
    em_rows, f1_rows, chain_rows, cost_rows, train_rows, source_rows = [], [], [], [], [], []
    for arm, a in rep["arms"].items():
        for r in a["runs"]:
            sft, rl = r["sft"], r["rl"]
            em_rows.append(
                [arm, r["seed"]]
                + [f"{_type(sft, t, 'em'):.1f} -> **{_type(rl, t, 'em'):.1f}**" for t in types]
                + [f"{sft['em']:.1f} -> **{rl['em']:.1f}**", _pair(r["rl_vs_sft"]), _pair(r["rl_vs_sft_" + MULTI_HOP])]
            )
            f1_rows.append(
                [arm, r["seed"]]
                + [f"{_type(sft, t, 'f1'):.1f} -> {_type(rl, t, 'f1'):.1f}" for t in types]
                + [f"{sft['f1']:.1f} -> {rl['f1']:.1f}"]
            )
            if MULTI_HOP in types:
                chain_rows.append(
                    [arm, r["seed"]]
                    + [
                        f"{_num(_type(sft, MULTI_HOP, key, None), '.1f')} -> {_num(_type(rl, MULTI_HOP, key, None), '.1f')}"
                        for key in ("first_hop_in_search_rate", "golden_in_search_rate", "em")
                    ]
                    + [
                        f"{_num(_type(sft, MULTI_HOP, 'mean_hops_found', None), '.2f')} -> "
                        f"{_num(_type(rl, MULTI_HOP, 'mean_hops_found', None), '.2f')}"
                    ]
                )
            cost_rows.append(
                [arm, r["seed"], f"{sft['searches']:.2f} -> {rl['searches']:.2f}"]
                + [_num(_type(rl, t, "mean_prefill_tokens", None)) for t in types]
                + [
                    _num(rl["prefill_tokens"]),
                    _num(_type(rl, MULTI_HOP, "mean_decode_tokens", None)),
                    _num(rl.get("decode_tokens")),
                    _num(rl["peak_context"], "d"),
                    " / ".join(f"{x:.0f}" for x in rl["context_by_turn"]),
                ]
            )
            lc, st = r["learner"], r["stage_s"]
            train_rows.append(
                [
                    arm,
                    r["seed"],
                    _num(lc["sft_steps"]),
                    _num(None if lc.get("sft_tokens") is None else lc["sft_tokens"] / 1e6, ".2f"),
                    lc["steps"],
                    _num(lc["tokens_per_traj"]),
                    _num(lc["step_s"], ".2f"),
                    _trend(r.get("reward")),  # absent from records kept before it was
                    f"{st.get('sft', 0) / 60:.1f} / {st.get('rl', 0) / 60:.1f} / {r['wall_s'] / 60:.1f}",
                ]
            )
            if r.get("rl_from"):
                source_rows.append(_source_row(arm, r))
    lines = ["Held-out test EM (%) by question type, after SFT -> after RL (greedy):", ""]
    heads = ["workflow", "seed", *types, "all", "RL vs SFT: fixed / broke", f"on {MULTI_HOP}"]
    lines += [markdown_table(heads, em_rows), "", "F1 (%), after SFT -> after RL:", ""]
    lines += [markdown_table(["workflow", "seed", *types, "all"], f1_rows), ""]
    if MULTI_HOP in types:
        lines += [
            f"Where {MULTI_HOP} questions were lost (% of them, after SFT -> after RL): a search returned the first "
            "hop's passage (one naming the bridge entity, other than the bridge's own), a search returned the answer "
            "(the second hop's), answered right; and how many hops of the chain the searches followed in order (the "
            "passage of each entity naming the next, the last naming the answer; - where not recorded):",
            "",
        ]
        heads = ["workflow", "seed", "first hop found", "answer found", "EM", "hops followed (mean)"]
        lines += [markdown_table(heads, chain_rows), ""]
    lines += [
        "Generation cost on the test questions (greedy; after RL; prefill: the prompt tokens of every generation "
        "request of a question, summed, i.e. what a generator without a prefix cache prefills; decode: the tokens "
        "the model generated, memory rewrites included; - where the run did not record it):",
        "",
    ]
    heads = ["workflow", "seed", "searches / question (SFT -> RL)"]
    heads += [f"prefill / {t} question" for t in types] + ["prefill / question", f"decode / {MULTI_HOP} question"]
    heads += ["decode / question", "peak context", "mean context by turn"]
    lines += [markdown_table(heads, cost_rows), ""]
    lines += [
        "Training cost (SFT and RL steps; SFT tokens: the context tokens of the oracle demonstrations times the "
        "epochs; learner tokens: context-row tokens per trajectory of the batch, median over steps; learner s / "
        "step: the step without the wait for a batch, median):",
        "",
    ]
    heads = [
        "workflow",
        "seed",
        "SFT steps",
        "SFT tokens (M)",
        "RL steps",
        "learner tokens / trajectory",
        "learner s / step",
        f"RL reward: {REWARD_WINDOW} steps before the last {REWARD_WINDOW} -> the last",
        "SFT / RL / all min",
    ]
    lines += [markdown_table(heads, train_rows), ""]
    if source_rows:
        lines += [
            "Against the run each started from (`--rl-from`: the same SFT model and start evaluation, then RL of "
            "its own): RL steps there -> here, EM after RL there -> here, right here and wrong there / the reverse "
            f"(sign test), and the training reward there ({REWARD_WINDOW} steps before its last {REWARD_WINDOW} -> "
            "its last; a rise: it was still learning when it stopped):",
            "",
        ]
        heads = ["workflow", "seed", "RL steps", f"{MULTI_HOP} EM", "all EM", "fixed / broke", f"on {MULTI_HOP}"]
        lines += [markdown_table([*heads, "reward there"], source_rows), ""]
    for arm, a in rep["arms"].items():
        p = a["pooled_rl_vs_sft"]
        lines.append(
            f"- {arm}, pooled over seeds: RL fixed {p['fixed']} answers and broke {p['broken']} (sign test p = {p['p']:.2g})."
        )
        if "pooled_vs_source" in a:
            p, h = a["pooled_vs_source"]["vs_source"], a["pooled_vs_source"]["vs_source_" + MULTI_HOP]
            lines.append(
                f"- {arm}, pooled over seeds, against the runs they started from: right here and wrong there on "
                f"{p['fixed']} questions, the reverse on {p['broken']} (p = {p['p']:.2g}); on {MULTI_HOP} questions "
                f"{h['fixed']} / {h['broken']} (p = {h['p']:.2g})."
            )
    for v in rep["memsearcher_vs_react"]:
        a, h = v["all"], v[MULTI_HOP]
        if a["p"] is None:
            lines.append(
                f"- seed {v['seed']}: no pairing of the two workflows (different questions or worlds, or a record "
                "without per-question answers)."
            )
            continue
        lines.append(
            f"- seed {v['seed']}, after RL: MemSearcher right where ReAct is wrong on {a['wins']} questions, the "
            f"reverse on {a['losses']} (p = {a['p']:.2g}); on {MULTI_HOP} questions {h['wins']} / {h['losses']} "
            f"(p = {h['p']:.2g})."
        )
    paired_seeds = [v for v in rep["memsearcher_vs_react"] if v["all"]["p"] is not None]
    if len(paired_seeds) > 1:
        a, h = rep["memsearcher_vs_react_pooled"]["all"], rep["memsearcher_vs_react_pooled"][MULTI_HOP]
        lines.append(
            f"- pooled over seeds {', '.join(str(v['seed']) for v in paired_seeds)}, after RL: MemSearcher right "
            f"where ReAct is wrong on {a['wins']} questions, the reverse on {a['losses']} (p = {a['p']:.2g}); on "
            f"{MULTI_HOP} questions {h['wins']} / {h['losses']} (p = {h['p']:.2g})."
        )
    lines += ["", "Targets:", ""]
    lines += [f"- {'met' if t['met'] else '**not met**'}: {t['target']} ({t['numbers']})" for t in rep["targets"]]
    lines += ["", f"`{rep['command']}`"]
    return "\n".join(lines) + "\n"


def plot(rep: dict, out_dir: str, name: str) -> List[str]:
    """EM by question type: one panel per type, a bar per workflow and stage (mean over seeds),
    every seed as a dot."""
    types = _types(rep)
    if not types:
        return []
    fig, axes = new_figure(3.2 * len(types), 3.4, cols=len(types))
    bars = [(arm, stage) for arm in rep["arms"] for stage in ("sft", "rl")]
    for ax, t in zip(axes[0], types):
        for i, (arm, stage) in enumerate(bars):
            ems = [_type(r[stage], t, "em") for r in rep["arms"][arm]["runs"]]
            color = f"C{list(rep['arms']).index(arm)}"
            ax.bar(i, statistics.mean(ems), color=color, alpha=0.45 if stage == "sft" else 0.9)
            ax.plot([i] * len(ems), ems, "k.", markersize=4)
        ax.set_xticks(range(len(bars)), [f"{arm}\n{stage.upper()}" for arm, stage in bars], fontsize=7)
        ax.set_title(t)
        ax.set_ylabel("held-out EM (%)")
    return save_figure(fig, out_dir, name)


def run(args: argparse.Namespace) -> int:
    configs = recipe_files(args)
    seeds, arms = parse_ints(args.seeds), [a for a in args.arms.split(",") if a]
    if not seeds or not arms:
        raise SystemExit(f"{PROG} paper: --seeds and --arms must name at least one each")
    # the defaults apply to the arms that run; a given --arm-set for an arm not run is a mistake
    arm_sets = [x for x in ARM_SETS if x.partition(":")[0] in arms] if args.arm_set is None else args.arm_set
    if args.rl_from and os.path.abspath(args.rl_from) == os.path.abspath(args.run_dir):
        raise SystemExit(f"{PROG} paper: --rl-from {args.rl_from} is --run-dir: its runs are the ones to start from")
    horizons = parse_ints(args.hops) if args.hops else []
    if not horizons:  # the recipe's own world, in --run-dir itself (the layout of every report so far)
        rep, problems = run_horizon(args, configs, seeds, arms, arm_overrides(arms, args.overrides, arm_sets))
        if problems:
            raise SystemExit(f"{PROG} paper: " + "; ".join(problems))
        return 0
    _refuse_horizon_keys(args.overrides + [x.partition(":")[2] for x in arm_sets])
    # ReAct's share of SFT grows with the horizon: without --arm-set its epochs are counted on
    # each horizon's and seed's demonstrations (`equal_sft_epochs`), not the recipe's 6
    equal_sft = args.arm_set is None and "react" in arms
    if equal_sft:
        arm_sets, arms_set_up = [], list(dict.fromkeys([*ARMS, *arms]))
    else:
        arms_set_up = arms
    reps, problems = {}, []
    for h in horizons:
        per_arm = arm_overrides(arms_set_up, [*args.overrides, *horizon_overrides(h)], arm_sets)
        where = argparse.Namespace(**vars(args))
        where.run_dir = os.path.join(args.run_dir, f"h{h}")
        where.records = os.path.join(args.records, f"h{h}") if args.records else ""
        where.rl_from = os.path.join(args.rl_from, f"h{h}") if args.rl_from else ""
        where.name = f"{args.name}_h{h}"
        try:
            reps[h], found = run_horizon(where, configs, seeds, arms, per_arm, equal_sft)
        except SystemExit as e:  # a horizon with no finished run: the others are still reported
            found = [str(e)]
        problems += [f"{h} hops: {p}" for p in found]
    if reps:
        rows = by_horizon(reps)
        data = {"command": command_line(), "horizons": rows, "crossing": prefill_crossing(rows)}
        text = horizons_markdown(data)
        print(text)
        write_report([args.run_dir, args.report_dir], f"{args.name}_horizons", data, text)
    if problems:
        raise SystemExit(f"{PROG} paper: " + "; ".join(problems))
    return 0


def _mean(values: List[Optional[float]]) -> Optional[float]:
    """The mean, or None when a run did not record the number (a 0 would pass for a measured cost)."""
    return statistics.mean(values) if values and None not in values else None  # type: ignore[type-var]


# the costs compared per horizon: (row key, what it is read from in a run's record)
HORIZON_COSTS = {
    "prefill": lambda r: _type(r["rl"], MULTI_HOP, "mean_prefill_tokens", None),
    "decode": lambda r: _type(r["rl"], MULTI_HOP, "mean_decode_tokens", None),
    "learner": lambda r: r["learner"]["tokens_per_traj"],
}


def by_horizon(reps: Dict[int, dict]) -> List[dict]:
    """One row per horizon and arm from each horizon's report: means over its seeds of the
    `MULTI_HOP` EM after SFT and after RL, all-question EM, the costs (prefill and decode tokens
    per `MULTI_HOP` question after RL, learner tokens per trajectory), SFT tokens, the peak
    context and the arm's wall time; and, on MemSearcher's row, its cost over ReAct's (of the
    means, and the prefill's of each seed both arms ran), the numbers the paper's efficiency claim
    is about, side by side for every horizon run."""
    rows = []
    for h, rep in sorted(reps.items()):
        here = []
        for arm, a in rep["arms"].items():
            runs = a["runs"]
            row = {
                "hops": h,
                "arm": arm,
                "seeds": [r["seed"] for r in runs],
                "em_sft": statistics.mean(_type(r["sft"], MULTI_HOP, "em") for r in runs),
                "em_rl": statistics.mean(_type(r["rl"], MULTI_HOP, "em") for r in runs),
                "all_sft": statistics.mean(r["sft"]["em"] for r in runs),
                "all_rl": statistics.mean(r["rl"]["em"] for r in runs),
                **{key: _mean([of(r) for r in runs]) for key, of in HORIZON_COSTS.items()},
                "sft_tokens": _mean([r["learner"].get("sft_tokens") for r in runs]),
                "peak_context": max(r["rl"]["peak_context"] or 0 for r in runs),
                "wall_min": statistics.mean(r["wall_s"] for r in runs) / 60,
            }
            here.append(row)
        by_arm = {row["arm"]: row for row in here}
        ms, react = by_arm.get("memsearcher"), by_arm.get("react")
        if ms and react:  # the ratios are the horizon's, on MemSearcher's row
            for key in HORIZON_COSTS:
                m, r = ms[key], react[key]
                ms[f"{key}_ratio"] = m / r if m is not None and r else None
            # the target asks for every seed: each seed's own prefill ratio beside the mean's
            of, arms = HORIZON_COSTS["prefill"], rep["arms"]
            m_by, r_by = ({r["seed"]: of(r) for r in arms[a]["runs"]} for a in ("memsearcher", "react"))
            ms["prefill_ratio_by_seed"] = {
                s: m_by[s] / r_by[s] for s in sorted(m_by.keys() & r_by.keys()) if m_by[s] is not None and r_by[s]
            }
        rows += here
    return rows


def _prefill_points(rows: List[dict]) -> List[Tuple[int, float]]:
    """(hops, MemSearcher's prefill over ReAct's) of every horizon where both arms recorded it."""
    return [(r["hops"], r["prefill_ratio"]) for r in rows if r.get("prefill_ratio") is not None]


def prefill_crossing(rows: List[dict]) -> Optional[dict]:
    """Where MemSearcher's prefill per `MULTI_HOP` question falls below ReAct's: the first two
    measured horizons whose mean ratios lie on both sides of 1, and the hop count between them
    where the straight line through the two ratios is 1 (an estimate: the cost model's curve
    bends, and a horizon trained in between is the measurement); None if it does not cross."""
    points = _prefill_points(rows)
    for (h1, r1), (h2, r2) in zip(points, points[1:]):
        if r1 >= 1 > r2:
            return {"between": [h1, h2], "hops": h1 + (r1 - 1) / (r1 - r2) * (h2 - h1)}
    return None


def horizons_markdown(data: dict) -> str:
    heads = [
        "hops",
        "workflow",
        "seeds",
        f"{MULTI_HOP} EM SFT -> RL",
        "all EM SFT -> RL",
        f"prefill / {MULTI_HOP} question",
        f"decode / {MULTI_HOP} question",
        "learner tokens / trajectory",
        "MemSearcher / ReAct: prefill, decode, learner",
        "prefill ratio by seed",
        "SFT tokens (M)",
        "peak context",
        "min / arm",
    ]
    rows = [
        [
            r["hops"],
            r["arm"],
            ",".join(map(str, r["seeds"])),
            f"{r['em_sft']:.1f} -> **{r['em_rl']:.1f}**",
            f"{r['all_sft']:.1f} -> **{r['all_rl']:.1f}**",
            _num(r["prefill"]),
            _num(r["decode"]),
            _num(r["learner"]),
            ", ".join(_num(r[f"{key}_ratio"], ".2f") for key in HORIZON_COSTS) if "prefill_ratio" in r else "",
            ", ".join(f"{s}: {x:.2f}" for s, x in r.get("prefill_ratio_by_seed", {}).items()),
            _num(None if r["sft_tokens"] is None else r["sft_tokens"] / 1e6, ".2f"),
            _num(r["peak_context"], "d"),
            f"{r['wall_min']:.1f}",
        ]
        for r in data["horizons"]
    ]
    lines = [
        f"By horizon (every {MULTI_HOP} question of a horizon's world has that many hops; means over its seeds, "
        "after RL where not said; each horizon's own report is <name>_h<hops>.md):",
        "",
        markdown_table(heads, rows),
        "",
    ]
    cross = prefill_crossing(data["horizons"])  # derived here too: the markdown needs only the rows
    if cross:
        (h1, h2), at = cross["between"], cross["hops"]
        lines += [
            f"MemSearcher's prefill per {MULTI_HOP} question falls below ReAct's between {h1} and {h2} hops: at "
            f"{at:.1f} hops on the straight line through the two mean ratios (a horizon trained in between measures it).",
            "",
        ]
    else:
        points = _prefill_points(data["horizons"])
        below, above = [str(h) for h, x in points if x < 1], [str(h) for h, x in points if x >= 1]
        if points:
            where = (
                "nowhere in the horizons measured"
                if not below
                else "at every horizon measured"
                if not above
                else f"at {', '.join(below)} hops, not at {', '.join(above)}"
            )
            lines += [f"MemSearcher's prefill per {MULTI_HOP} question is below ReAct's {where}.", ""]
    lines.append(f"`{data['command']}`")
    return "\n".join(lines) + "\n"


def _refuse_horizon_keys(overrides: List[str]) -> None:
    """With --hops the bench sets the horizon's keys (`horizon_overrides`); an override of one
    would run another horizon under its name."""
    keys = {o.partition("=")[0] for o in horizon_overrides(2)}
    for item in overrides:
        key = re.sub(r"\[([^\]]*)\]", r".\1", item.partition("=")[0]).strip().lstrip("+~")
        if key in keys:
            raise SystemExit(f"{PROG} paper: override {item!r}: with --hops the bench sets {key} per horizon")


def run_horizon(
    args: argparse.Namespace,
    configs: List[str],
    seeds: List[int],
    arms: List[str],
    per_arm: Dict[str, List[str]],
    equal_sft: bool = False,
) -> Tuple[dict, List[str]]:
    """Train what is missing under `args.run_dir` (with `equal_sft`, ReAct for MemSearcher's SFT
    tokens), then report every finished run and kept record there: the report and the problems
    (failed runs, records of another world)."""
    failed = []
    if args.rl_from and not args.collect_only:  # every arm first: ReAct's SFT epochs read MemSearcher's demonstrations
        for seed in seeds:
            for arm in arms:
                run_dir = os.path.join(args.run_dir, arm, f"s{seed}")
                if not finished(run_dir):
                    start_from(os.path.join(args.rl_from, arm, f"s{seed}"), run_dir)
    for seed in seeds:
        for arm in arms:
            run_dir = os.path.join(args.run_dir, arm, f"s{seed}")
            if finished(run_dir) or args.collect_only:
                continue
            overrides = per_arm[arm]
            if equal_sft and arm == "react":
                overrides = [*overrides, f"learner.sft.epochs={equal_sft_epochs(configs, args.run_dir, seed, per_arm)}"]
            if args.rl_from:
                resolved = run_config(configs, [f"run_dir={run_dir}", f"seed={seed}", *overrides])
                check_same_start(os.path.join(args.rl_from, arm, f"s{seed}"), resolved)
            try:
                train_run(configs, run_dir, seed, overrides, f"{arm} seed {seed}")
            except SystemExit as e:  # the other runs go on, and the report has what finished
                print(e, flush=True)
                failed.append(f"{arm} seed {seed}")
    # every kept record, then every finished run under --run-dir of either arm (read afresh, it
    # wins): --arms chooses what trains, never what is reported, so one seed or one arm per
    # invocation merges with the earlier ones
    results = load_records(args.records) if args.records else {}
    kept = []  # records of another world, not replaced: reported after the report is written
    on_disk = sorted(os.listdir(args.run_dir)) if os.path.isdir(args.run_dir) else []
    for arm in dict.fromkeys([*ARMS, *arms, *on_disk]):
        for seed in finished_seeds(os.path.join(args.run_dir, arm)):
            rec = arm_result(os.path.join(args.run_dir, arm, f"s{seed}"), arm, seed)
            old = results.get(arm, {}).get(seed)  # its kept record: a run on another world does not replace it
            if old is not None and not same_world(old, rec):
                kept.append(
                    f"{record_path(args.records, arm, seed)} was run on another world (test sha256 "
                    f"{old['world'].get('test', '?')[:12]}, {rec['run_dir']} {rec['world'].get('test', '?')[:12]}): "
                    "kept, and the run reported from its record; move the record away to replace it"
                )
                continue
            if (
                old is not None
                and rec["rl_from"]
                and rec["rl_from"]["rl"] is None
                and (old.get("rl_from") or {}).get("rl")
            ):
                # its source's run dir is gone since the record was kept: the comparison made then stays
                rec["rl_from"], rec["learner"]["sft_steps"] = old["rl_from"], old["learner"]["sft_steps"]
            results.setdefault(arm, {})[seed] = rec
            if args.records:
                save_record(args.records, rec)
    if not results:
        raise SystemExit(f"{PROG} paper: no finished run under {args.run_dir}")
    results = {arm: results[arm] for arm in dict.fromkeys([*ARMS, *sorted(results)]) if arm in results}
    all_seeds = sorted({s for by_seed in results.values() for s in by_seed})
    rep = report(results, all_seeds, command_line(), PaperTargets(args.target_rl_gain, args.target_prefill_ratio))
    text = markdown(rep)
    print(text)
    write_report([args.run_dir, args.report_dir], args.name, rep, text)
    for out in filter(None, [args.run_dir, args.report_dir]):
        plot(rep, out, args.name)  # matplotlib was checked before any run started (NEEDS)
    problems = [f"{', '.join(failed)} failed; the report has the finished runs"] if failed else []
    return rep, problems + kept
