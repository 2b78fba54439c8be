"""`python -m benchmarks eval`: training throughput with the evaluation beside training off and on.

The same start and steps, arms interleaved per repeat: `off` (`eval.interval=0`), `own` (the
evaluator's own generator, pinned versions) and `shared` (the training generators at a lower
priority). Throughput is the learner's steady-state groups per second (`arms.summarize`); the
ratio of each arm to `off` is taken within a repeat (arms side by side share the machine's
drift) and the medians are reported. Each `on` arm also says how many versions it evaluated,
how long one evaluation took and how far its results lagged behind training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Dict, List

from areal_mem import policy_snapshots

from .arms import add_arm_arguments, arm_overrides, run_arm, start_of
from .output import PROG, command_line, markdown_table, write_json

HELP = "evaluation beside training: throughput with eval.interval off, own generator, shared generators"
PLACEMENTS = ("own", "shared")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_arm_arguments(parser)
    parser.add_argument("--interval", type=int, default=4, help="eval.interval of the `on` arms (versions)")
    parser.add_argument("--dev-questions", type=int, default=32, help="eval.dev_questions of the `on` arms")
    parser.add_argument("--placements", default="own,shared", help="which `on` arms to run (own, shared)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; figures are medians")
    parser.set_defaults(steps=24)


def arm_settings(args) -> Dict[str, List[str]]:
    arms = {"off": ["eval.interval=0"]}
    for placement in [p.strip() for p in args.placements.split(",") if p.strip()]:
        if placement not in PLACEMENTS:
            raise SystemExit(f"{PROG} eval: --placements: unknown {placement!r}; one of {PLACEMENTS}")
        arms[placement] = [
            f"eval.interval={args.interval}",
            f"eval.placement={placement}",
            f"eval.dev_questions={args.dev_questions}",
        ]
    return arms


def curve_of(arm_dir: str) -> List[dict]:
    return policy_snapshots.read_curve(arm_dir)


def analyze(repeats: List[Dict[str, dict]]) -> dict:
    """`repeats`: per repeat, {arm: {"summary": ..., "curve": [...]}}; medians over repeats."""
    rows = []
    for name in repeats[0]:
        ratios = [rep[name]["summary"]["groups_per_s"] / rep["off"]["summary"]["groups_per_s"] for rep in repeats]
        curves = [rep[name]["curve"] for rep in repeats]
        evals = [c for curve in curves for c in curve]
        rows.append(
            {
                "arm": name,
                "step_wall_s": statistics.median(rep[name]["summary"]["step_wall_s"] for rep in repeats),
                "groups_per_s": statistics.median(rep[name]["summary"]["groups_per_s"] for rep in repeats),
                "throughput_vs_off": statistics.median(ratios),
                "throughput_vs_off_each": ratios,
                "gen_idle_frac": _median([rep[name]["summary"].get("gen_idle_frac") for rep in repeats]),
                "versions_evaluated": _median([len(c) for c in curves]),
                "eval_s": _median([c["eval_s"] for c in evals]),
                "lag_s": _median([c["lag_s"] for c in evals]),
                "pinned_fraction": _median([c["pinned_fraction"] for c in evals]),
            }
        )
    return {"repeats": len(repeats), "rows": rows}


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def render(result: dict) -> str:
    def fmt(v, spec=".3g"):
        return "-" if v is None else format(v, spec)

    return markdown_table(
        [
            "arm",
            "s/step",
            "throughput vs off",
            "each repeat",
            "generator idle",
            "versions evaluated",
            "s per evaluation",
            "result lag s",
            "pinned",
        ],
        [
            [
                r["arm"],
                fmt(r["step_wall_s"]),
                fmt(r["throughput_vs_off"], ".2f"),
                " / ".join(f"{x:.2f}" for x in r["throughput_vs_off_each"]),
                fmt(r["gen_idle_frac"], ".0%"),
                fmt(r["versions_evaluated"], ".0f") if r["arm"] != "off" else "-",
                fmt(r["eval_s"], ".1f"),
                fmt(r["lag_s"], ".1f"),
                fmt(r["pinned_fraction"], ".2f"),
            ]
            for r in result["rows"]
        ],
    )


def run(args: argparse.Namespace) -> int:
    start = start_of(args)
    arms = arm_settings(args)
    repeats = []
    for rep in range(args.repeats):
        measured = {}
        for name, extra in arms.items():
            overrides = [*arm_overrides(args, eta=2), *extra]
            arm = run_arm(args.run_dir, f"eval-{name}-r{rep}", args.config, start, overrides, args.poll_s)
            arm_dir = next(a.split("=", 1)[1] for a in arm.argv if a.startswith("run_dir="))
            measured[name] = {"summary": arm.summary(), "curve": curve_of(arm_dir)}
        repeats.append(measured)
    result = {**analyze(repeats), "steps": args.steps, "interval": args.interval, "command": command_line()}
    result["raw"] = [{k: {"summary": v["summary"], "curve": v["curve"]} for k, v in r.items()} for r in repeats]
    path = write_json(args.run_dir, "eval_overhead", result)
    table = render(result)
    with open(os.path.join(args.run_dir, "eval_overhead.md"), "w", encoding="utf-8") as f:
        f.write(f"`{result['command']}`\n\n{table}\n")
    print("\n" + table + f"\n\n(json: {path})", flush=True)
    print(json.dumps({r["arm"]: round(r["throughput_vs_off"], 3) for r in result["rows"]}), flush=True)
    return 0
