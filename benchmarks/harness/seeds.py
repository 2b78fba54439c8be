"""`python -m benchmarks seeds`: the whole recipe (`areal-mem train`) on several seeds, every run reported.

One claim about learning needs several seeds: one SFT run of the tiny model lands anywhere in a
wide range, and what RL adds depends on where it lands (docs/debug_recipe.md). Each seed runs
from its own fresh run dir (`<run-dir>/s<seed>`, the world, model, SFT and RL all its own), one
after the other so that each has the machine to itself and its stage times mean something. A
seed whose `train_summary.json` exists is read, not rerun: the bench can run one seed per
invocation and merge. The report has, per seed, the held-out test EM after SFT and after RL,
the questions RL fixed and broke with a paired sign test, the dev curve beside training and
the stage times; and the same pooled over seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

from .arms import DEFAULT_CONFIG, parse_ints
from .output import PROG, command_line, markdown_table, write_report
from .paired import compare_results, pooled, read_results

HELP = "the whole train recipe on several seeds, each from a fresh run dir; SFT vs RL test EM, sign tests"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="the recipe (default configs/debug_cpu.yaml)")
    parser.add_argument("--run-dir", default="runs/seeds", help="one run dir per seed (s<seed>) and the report")
    parser.add_argument(
        "--seeds", default="0,1,2,3,4", help="comma-separated seeds to run; the report has every finished one"
    )
    parser.add_argument(
        "--report-dir", default="", help="also write seeds_<config name>.md/.json here (e.g. docs/reports)"
    )
    parser.add_argument("--name", default="", help="report file name (default seeds_<config name>)")
    parser.add_argument("--collect-only", action="store_true", help="report the finished seeds; train none")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override for every seed")


def seed_dir(args, seed: int) -> str:
    return os.path.join(args.run_dir, f"s{seed}")


def train_run(configs: Sequence[str], run_dir: str, seed: int, overrides: Sequence[str], label: str) -> None:
    """`areal-mem train` of one seed in its own run dir, as a child process (the stages' own)."""
    cmd = [sys.executable, "-m", "areal_mem.app.cli", "train"]
    for config in configs:
        cmd += ["--config", config]
    cmd += [f"run_dir={run_dir}", f"seed={seed}", *overrides]
    print(f"[bench] {label}: {' '.join(cmd[2:])}", flush=True)
    t0 = time.monotonic()
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        raise SystemExit(f"{PROG}: {label} failed (exit {rc}); its logs are in {run_dir}/logs")
    print(f"[bench] {label}: done in {time.monotonic() - t0:.0f} s", flush=True)


def finished(run_dir: str) -> bool:
    return os.path.exists(os.path.join(run_dir, "train_summary.json"))


def finished_seeds(root: str) -> List[int]:
    """The seeds with a finished run under `root` (`s<seed>/train_summary.json`): a bench run for
    one seed reports it together with those finished before."""
    if not os.path.isdir(root):
        return []
    names = [n for n in os.listdir(root) if n[:1] == "s" and n[1:].isdigit()]
    return sorted(int(n[1:]) for n in names if finished(os.path.join(root, n)))


def read_summary(run_dir: str) -> dict:
    """`train_summary.json`, with `wall_s` the run's: a resumed run's own is its last invocation's
    only, so there it is the sum of the stage times (kept across invocations, the time of a
    stage that failed and ran again included)."""
    with open(os.path.join(run_dir, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    if summary.get("resumed"):
        summary["wall_s"] = round(sum(summary["stage_s"].values()), 1)
    return summary


@dataclass
class SeedResult:
    """One finished seed: held-out test EM after SFT and after RL, the paired comparison of the
    two over the same questions, the dev curve beside training and the stage times."""

    seed: int
    questions: int
    sft_em: float
    rl_em: float
    fixed: int  # questions right only after RL
    broken: int  # questions right only before
    p: float  # sign test of fixed against broken
    turns: List[Optional[float]]  # mean turns after SFT, after RL
    dev_em: List[float]
    train_em: List[float]
    stage_s: Dict[str, float]
    wall_s: float


@dataclass
class SeedsReport:
    """Every finished seed and the same pooled over them (written as `<name>.json`)."""

    command: str
    seeds: List[SeedResult]
    pooled: Dict[str, float]  # fixed, broken, p of the sum
    mean: Dict[str, float]  # sft_em, rl_em
    range: Dict[str, List[float]]  # sft_em, rl_em: [min, max]
    rl_above_sft: int
    median_wall_s: float


def seed_result(run_dir: str, seed: int) -> SeedResult:
    summary = read_summary(run_dir)
    before = os.path.join(run_dir, "eval", "start", "results.jsonl")
    fixed, broken, p = compare_results(before, os.path.join(run_dir, "eval", "final", "results.jsonl"))
    curve = [c for c in summary.get("eval_during") or [] if "em" in c]
    return SeedResult(
        seed=seed,
        questions=len(read_results(before)),
        sft_em=summary["eval_start"]["em"],
        rl_em=summary["eval_final"]["em"],
        fixed=fixed,
        broken=broken,
        p=p,
        turns=[summary["eval_start"].get("mean_turns"), summary["eval_final"].get("mean_turns")],
        dev_em=[c["em"] for c in curve],
        train_em=[c["train_em"] for c in curve if "train_em" in c],
        stage_s=summary["stage_s"],
        wall_s=summary["wall_s"],
    )


def report(results: List[SeedResult], command: str) -> SeedsReport:
    fixed, broken, p = pooled([(r.fixed, r.broken) for r in results])
    sft, rl = [r.sft_em for r in results], [r.rl_em for r in results]
    return SeedsReport(
        command=command,
        seeds=results,
        pooled={"fixed": fixed, "broken": broken, "p": p},
        mean={"sft_em": statistics.mean(sft), "rl_em": statistics.mean(rl)},
        range={"sft_em": [min(sft), max(sft)], "rl_em": [min(rl), max(rl)]},
        rl_above_sft=sum(1 for a, b in zip(sft, rl) if b > a),
        median_wall_s=statistics.median(r.wall_s for r in results),
    )


def markdown(rep: SeedsReport) -> str:
    rows = []
    for r in rep.seeds:
        st = r.stage_s
        curve = " / ".join(f"{x:.0f}" for x in r.dev_em) or "-"
        rows.append(
            [
                r.seed,
                f"{r.sft_em:.2f}%",
                f"**{r.rl_em:.2f}%**",
                f"{r.rl_em - r.sft_em:+.2f}",
                f"{r.fixed} / {r.broken}",
                f"{r.p:.2g}",
                curve,
                f"{st.get('sft', 0):.0f} / {st.get('rl', 0):.0f}",
                f"{r.wall_s / 60:.1f}",
            ]
        )
    heads = ["seed", "test EM after SFT", "after RL", "change", "fixed / broken", "sign test p"]
    heads += ["dev EM beside RL", "SFT s / RL s", "minutes"]
    pool, mean, rng = rep.pooled, rep.mean, rep.range
    lines = [
        markdown_table(heads, rows),
        "",
        f"RL above SFT on {rep.rl_above_sft} of {len(rep.seeds)} seeds. Mean test EM "
        f"{mean['sft_em']:.2f}% after SFT (range {rng['sft_em'][0]:.2f}-{rng['sft_em'][1]:.2f}), "
        f"{mean['rl_em']:.2f}% after RL (range {rng['rl_em'][0]:.2f}-{rng['rl_em'][1]:.2f}). "
        f"Pooled over seeds RL fixed {pool['fixed']} answers and broke {pool['broken']} "
        f"(sign test p = {pool['p']:.2g}). Median wall time {rep.median_wall_s / 60:.1f} min.",
        "",
        f"`{rep.command}`",
    ]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    seeds = parse_ints(args.seeds)
    if not seeds:
        raise SystemExit(f"{PROG} seeds: --seeds is empty")
    for seed in seeds:
        run_dir = seed_dir(args, seed)
        if not finished(run_dir) and not args.collect_only:
            train_run([args.config], run_dir, seed, args.overrides, f"seed {seed}")
    done = [seed_result(seed_dir(args, s), s) for s in finished_seeds(args.run_dir)]
    if not done:
        raise SystemExit(f"{PROG} seeds: no finished seed under {args.run_dir}")
    rep = report(done, command_line())
    text = markdown(rep)
    print(text)
    name = args.name or "seeds_" + os.path.splitext(os.path.basename(args.config))[0]
    write_report([args.run_dir, args.report_dir], name, asdict(rep), text)
    return 0
