"""`python -m benchmarks staleness`: reward curves at eta 0, 2, 4, 8 with the decoupled loss and with
plain PPO (`learner.loss.decoupled=false`: the behaviour policy is the proximal one), one plot.

Arms with the same command line as the `async` bench's are shared (`arms.run_arm`).
"""

from __future__ import annotations

import argparse
from typing import Dict, List

from .arms import add_arm_arguments, arm_overrides, parse_ints, run_arm, start_of
from .output import command_line, markdown_table, new_figure, save_figure, write_json

HELP = "staleness: reward curves at eta 0, 2, 4, 8 with the decoupled loss and with plain PPO"
NEEDS = ("matplotlib",)
LOSSES = {"decoupled": True, "ppo": False}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_arm_arguments(parser)
    parser.add_argument("--etas", default="0,2,4,8", help="staleness bounds")
    parser.add_argument("--figures-dir", default="", help="also copy the plot here (docs/figures)")


def smooth(xs: List[float], k: int = 3) -> List[float]:
    """Trailing mean over k steps: one batch of a few groups is a noisy reward estimate."""
    return [sum(xs[max(0, i - k + 1) : i + 1]) / (i + 1 - max(0, i - k + 1)) for i in range(len(xs))]


def plot(curves: Dict[str, List[float]], run_dir: str, figures_dir: str = "") -> List[str]:
    fig, axes = new_figure(7, 4)
    ax = axes[0][0]
    colors = {}
    for key, rewards in curves.items():
        eta, loss = key.split("-")
        color = colors.setdefault(eta, f"C{len(colors)}")
        ax.plot(
            range(1, len(rewards) + 1),
            smooth(rewards),
            color=color,
            linestyle="-" if loss == "decoupled" else "--",
            label=f"eta {eta[3:]}, {loss}",
        )
    ax.set_xlabel("learner step")
    ax.set_ylabel("batch reward (trailing mean of 3)")
    ax.set_title("Reward by staleness bound: decoupled loss (solid) vs plain PPO (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, run_dir, "staleness", figures_dir)


def render(result: dict) -> str:
    return markdown_table(
        [
            "eta",
            "loss",
            "reward, first 3 steps",
            "reward, last 3 steps",
            "mean reward",
            "mean staleness",
            "groups dropped as stale",
        ],
        [
            [
                r["eta"],
                r["loss"],
                r["reward_first"],
                r["reward_final"],
                r["reward_mean"],
                r["staleness_mean"],
                int(r["dropped_stale"]),
            ]
            for r in result["rows"]
        ],
    )


def run(args: argparse.Namespace) -> int:
    start = start_of(args)
    rows, curves = [], {}
    for eta in parse_ints(args.etas):
        for loss, decoupled in LOSSES.items():
            arm = run_arm(
                args.run_dir, f"eta{eta}-{loss}", args.config, start, arm_overrides(args, eta, decoupled), args.poll_s
            )
            rewards = [s["reward"] for s in arm.steps]
            curves[f"eta{eta}-{loss}"] = rewards
            head = rewards[:3]
            rows.append({"eta": eta, "loss": loss, "reward_first": sum(head) / len(head), **arm.summary()})
    result = {
        "rows": rows,
        "curves": curves,
        "steps": args.steps,
        "command": command_line(),
        "plots": plot(curves, args.run_dir, args.figures_dir),
    }
    write_json(args.run_dir, "staleness", result)
    print("\n" + render(result), flush=True)
    return 0
