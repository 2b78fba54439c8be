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

This module is the command (its options, the arms, what trains and what is reported); the rest
is split by idea: reading a finished run (`paper_runs`), the kept records (`paper_records`), the
sign tests and targets (`paper_stats`), the markdown and the plot (`paper_markdown`), the
horizons (`paper_horizons`), and the recipe it shares with `cost` (`recipe`). The `x as x`
imports are names its callers read from here.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Dict, List, Tuple

from .arms import parse_ints
from .output import PROG, command_line, write_report
from .paper_horizons import by_horizon, horizons_markdown, prefill_crossing, refuse_horizon_keys
from .paper_markdown import markdown, plot
from .paper_records import load_records, record_path, same_world, save_record
from .paper_runs import arm_result, epoch_tokens
from .paper_runs import learner_cost as learner_cost
from .paper_runs import sft_tokens as sft_tokens
from .paper_stats import MULTI_HOP, PaperTargets, report
from .paper_stats import targets as targets
from .recipe import PAPER_CONFIG as PAPER_CONFIG
from .recipe import add_recipe_option, horizon_overrides, recipe_files
from .rl_from import check_same_start, run_config, start_from
from .seeds import finished, finished_seeds, train_run

HELP = "MemSearcher vs ReAct trained alike on multi-hop questions: EM by type, cost, sign tests (per seed)"
NEEDS = ("matplotlib",)
ARMS = ("memsearcher", "react")
# Equal SFT training, not equal epochs: ReAct's oracle writes one context row per question,
# MemSearcher's about three (22,820 rows of 5.65M tokens for 8,000 questions, seed 0; ReAct's
# 2.68M), so ReAct's 6 epochs are about MemSearcher's 3 in tokens (16M against 17M) and, with
# batches of a token budget, in steps
ARM_SETS = ("react:learner.sft.epochs=6",)


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
    refuse_horizon_keys(args.overrides + [x.partition(":")[2] for x in arm_sets])
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
