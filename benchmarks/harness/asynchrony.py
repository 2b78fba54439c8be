"""`areal-mem bench async`: the debug recipe synchronous (eta 0) against asynchronous (eta 2, 4).

Same start, same steps, generator and learner pinned to separate cores where the machine has
two. Throughput is measured over the steady-state window of each arm (`arms.summarize`); the
machine bound `(t_gen + t_train) / max(t_gen, t_train)` comes from the synchronous arm's
generator busy seconds per step and learner compute seconds per step: what overlapping the two
could gain at most.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Dict, List

from areal_mem.config import ConfigError

from .arms import add_arm_arguments, arm_overrides, parse_ints, run_arm, start_of
from .output import command_line, markdown_table, new_figure, save_figure, write_json

HELP = "async vs sync: the debug recipe at max_staleness 0, 2, 4; throughput, idle time, bound"
TARGET_SPEEDUP, TARGET_IDLE = 1.5, 0.10
# issue #19's targets for eta 2, judged on every repeat: a median can hide one slow repeat
TARGET_BOUND_SHARE, TARGET_REPREFILL = 0.90, 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_arm_arguments(parser)
    parser.add_argument("--etas", default="0,2,4", help="staleness bounds; the first is the baseline")
    parser.add_argument(
        "--repeats", type=int, default=1, help="run the arms this many times, interleaved; figures are medians"
    )
    parser.add_argument("--figures-dir", default="", help="also copy the plot here (docs/figures)")


def analyze(*repeats: Dict[int, Dict[str, float]]) -> dict:
    """Speed-ups against the first arm and the machine bound from its per-step times.

    With several repeats (each `{eta: summary}`, run interleaved), every figure is the median
    over the repeats, and a speed-up is the median of each repeat's own ratio: arms that ran
    side by side share the machine's drift.
    """
    etas = list(repeats[0])
    rows = []
    for eta in etas:
        runs = [rep[eta] for rep in repeats]
        ratios = [rep[eta]["groups_per_s"] / rep[etas[0]]["groups_per_s"] for rep in repeats]
        row = {
            "eta": eta,
            **{k: _median([r[k] for r in runs]) for k in runs[0] if all(k in r for r in runs)},
            "speedup": statistics.median(ratios),
        }
        if len(repeats) > 1:
            row["speedups"] = ratios
            row["gen_idle_fracs"] = [r.get("gen_idle_frac") for r in runs]
            row["gen_reprefill_fracs"] = [r.get("gen_reprefill_frac") for r in runs]
            bounds = [_bound(rep[etas[0]]) for rep in repeats]
            if None not in bounds and eta != etas[0]:  # each repeat against its own baseline arm's bound
                row["bound_fracs"] = [ratio / b for ratio, b in zip(ratios, bounds)]
            if eta != etas[0] and all("learner_us_per_token" in rep[e] for rep in repeats for e in (eta, etas[0])):
                row["learner_slowdowns"] = [
                    rep[eta]["learner_us_per_token"] / rep[etas[0]]["learner_us_per_token"] - 1.0 for rep in repeats
                ]
        rows.append(row)
    base = rows[0]
    t_gen, t_train = base.get("t_gen_s"), base["t_train_s"]
    out = {"baseline_eta": etas[0], "repeats": len(repeats), "rows": rows, "t_gen_s": t_gen, "t_train_s": t_train}
    if t_gen is not None:
        out["bound"] = _bound(base)
        # When training is the slower side, the staleness bound stops rollouts for the rest of
        # each step: the generator idles at least this share however large eta is.
        out["idle_floor"] = max(0.0, 1.0 - t_gen / t_train)
    two = next((r for r in rows if r["eta"] == 2), None)
    if two is not None and etas[0] == 0:
        out["target_met"] = bool(two["speedup"] >= TARGET_SPEEDUP and two.get("gen_idle_frac", 1.0) < TARGET_IDLE)
        if "bound" in out:
            out["targets"] = repeat_targets(two, out["bound"])
    return out


def repeat_targets(two: dict, bound: float) -> List[dict]:
    """Issue #19's targets for the eta-2 row, each judged on every repeat (one run: one repeat).

    A target whose figure an arm did not measure (a generator without engine stats) is not met:
    nothing unmeasured is called met."""
    shares = two.get("bound_fracs") or [two["speedup"] / bound]
    idle = two.get("gen_idle_fracs") or [two.get("gen_idle_frac")]
    again = two.get("gen_reprefill_fracs") or [two.get("gen_reprefill_frac")]

    def target(text: str, values: list, ok) -> dict:
        return {"target": text, "per_repeat": values, "met": None not in values and all(map(ok, values))}

    return [
        target(
            f"eta 2 at >= {TARGET_BOUND_SHARE:.0%} of its repeat's machine bound",
            shares,
            lambda v: v >= TARGET_BOUND_SHARE,
        ),
        target(f"generator idle < {TARGET_IDLE:.0%} at eta 2", idle, lambda v: v < TARGET_IDLE),
        target(
            f"re-prefill < {TARGET_REPREFILL:.0%} of prefill tokens at eta 2", again, lambda v: v < TARGET_REPREFILL
        ),
    ]


def _bound(summary: dict):
    """What overlapping this arm's generation and training could give at most (None: no t_gen)."""
    t_gen, t_train = summary.get("t_gen_s"), summary["t_train_s"]
    return None if t_gen is None else (t_gen + t_train) / max(t_gen, t_train)


def _median(values: list):
    """The median of numbers, or key by key of dicts of numbers (CPU seconds by role)."""
    if isinstance(values[0], dict):
        return {k: statistics.median(v.get(k, 0.0) for v in values) for k in values[0]}
    return statistics.median(values)


def plot(result: dict, run_dir: str, figures_dir: str = "") -> list:
    fig, axes = new_figure(8, 3.5, cols=2)
    rows = result["rows"]
    labels = [f"eta {r['eta']}" for r in rows]
    axes[0][0].bar(labels, [r["speedup"] for r in rows], color="C0")
    if "bound" in result:
        axes[0][0].axhline(result["bound"], color="C3", linestyle="--", label=f"machine bound {result['bound']:.2f}x")
        axes[0][0].legend(fontsize=8)
    axes[0][0].set_ylabel("groups/s relative to eta 0")
    axes[0][0].set_title("Throughput")
    x = range(len(rows))
    axes[0][1].bar([i - 0.2 for i in x], [100 * r["learner_wait_frac"] for r in rows], 0.4, label="learner waits")
    axes[0][1].bar([i + 0.2 for i in x], [100 * r.get("gen_idle_frac", 0.0) for r in rows], 0.4, label="generator idle")
    axes[0][1].set_xticks(list(x), labels)
    axes[0][1].set_ylabel("% of wall time")
    axes[0][1].set_title("Idle time")
    axes[0][1].legend(fontsize=8)
    return save_figure(fig, run_dir, "async", figures_dir)


def render(result: dict) -> str:
    pct = lambda v: "-" if v is None else f"{100 * v:.0f}%"  # noqa: E731
    table = markdown_table(
        [
            "eta",
            "s/step",
            "groups/s",
            "trained tok/s",
            "context tok/s",
            "speed-up",
            "learner waits",
            "generator idle",
            "gen busy s/step",
            "train+push s/step",
            "final reward",
        ],
        [
            [
                r["eta"],
                r["step_wall_s"],
                r["groups_per_s"],
                r["trained_tokens_per_s"],
                r["context_tokens_per_s"],
                f"{r['speedup']:.2f}x",
                pct(r["learner_wait_frac"]),
                pct(r.get("gen_idle_frac")),
                r.get("t_gen_s", "-"),
                r["t_train_s"],
                r["reward_final"],
            ]
            for r in result["rows"]
        ],
    )
    lines = [table, ""]
    if "bound" in result:
        best = max(r["speedup"] for r in result["rows"])
        lines.append(
            f"machine bound from the eta={result['baseline_eta']} arm: (t_gen + t_train) / max = "
            f"({result['t_gen_s']:.2f} + {result['t_train_s']:.2f}) / "
            f"{max(result['t_gen_s'], result['t_train_s']):.2f} = {result['bound']:.2f}x; "
            f"best measured speed-up {best:.2f}x"
        )
    if result.get("idle_floor"):
        lines.append(
            f"training is the slower side (t_train > t_gen), so the generator idles at least "
            f"1 - t_gen / t_train = {100 * result['idle_floor']:.0f}% of the time at any eta"
        )
    for r in result["rows"]:
        if "speedups" in r:
            lines.append(
                f"eta {r['eta']} over {len(r['speedups'])} repeats: speed-up "
                f"{', '.join(f'{v:.2f}x' for v in r['speedups'])}; generator idle "
                f"{', '.join(pct(v) for v in r['gen_idle_fracs'])}"
                + (
                    f"; of each repeat's own bound {', '.join(pct(v) for v in r['bound_fracs'])}"
                    if "bound_fracs" in r
                    else ""
                )
            )
    slow = [r for r in result["rows"] if "learner_slowdowns" in r]
    if slow:
        lines += [
            "",
            "the learner's time per trained token against its repeat's baseline arm (the same work in "
            "every arm: how much slower the machine ran, from its own drift or from the overlap itself; "
            "a repeat far from 0% measured the machine as much as the overlap): "
            + "; ".join(f"eta {r['eta']} {', '.join(f'{v:+.0%}' for v in r['learner_slowdowns'])}" for r in slow),
        ]
    if all("gen_decode_ms_per_row" in r for r in result["rows"]):
        lines += [
            "",
            "generator per learner step (busy time split; of the tokens prefilled, those prefilled "
            "again: requests a weight push aborted and their clients resent, or retracted rows):",
            "",
            markdown_table(
                [
                    "eta",
                    "prefill tokens",
                    "of them again",
                    "prompt tokens from the prefix cache",
                    "joins that copied the batch",
                    "prefill s",
                    "decode s",
                    "decode ms/row",
                    "rows per decode step",
                ],
                [
                    [
                        r["eta"],
                        r["gen_prefill_tokens_per_step"],
                        pct(r.get("gen_reprefill_frac")),
                        pct(r.get("gen_prefix_hit_frac")),
                        pct(r.get("gen_join_copy_frac")),
                        r["gen_prefill_s_per_step"],
                        r["gen_decode_s_per_step"],
                        r["gen_decode_ms_per_row"],
                        r["gen_decode_batch"],
                    ]
                    for r in result["rows"]
                ],
            ),
            "",
        ]
    if all("dropped_stale" in r for r in result["rows"]):
        lines += [
            "groups dropped as stale over the arm (medians; groups that outlived the staleness bound, "
            "generated for nothing): " + ", ".join(f"eta {r['eta']}: {r['dropped_stale']:g}" for r in result["rows"]),
            "",
        ]
    if all("cpu_s_per_step" in r for r in result["rows"]):
        roles = sorted({k for r in result["rows"] for k in r["cpu_s_per_step"]})
        lines += [
            "CPU seconds per learner step by process (all cores; busy = their sum over cores x wall time):",
            "",
            markdown_table(
                ["eta", *roles, "sum", "cores busy"],
                [
                    [
                        r["eta"],
                        *(r["cpu_s_per_step"].get(k, 0.0) for k in roles),
                        sum(r["cpu_s_per_step"].values()),
                        pct(r["cpu_busy_frac"]),
                    ]
                    for r in result["rows"]
                ],
            ),
            "",
        ]
    if "target_met" in result:
        lines.append(
            f"target (eta 2 >= {TARGET_SPEEDUP}x synchronous, generator idle < "
            f"{100 * TARGET_IDLE:.0f}%): {'MET' if result['target_met'] else 'NOT met'}"
        )
    if result.get("targets"):
        lines += [
            "",
            "targets of issue #19, each judged on every repeat:",
            "",
            markdown_table(
                ["target", "per repeat", "met"],
                [
                    [t["target"], ", ".join(pct(v) for v in t["per_repeat"]), "MET" if t["met"] else "NOT met"]
                    for t in result["targets"]
                ],
            ),
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    etas = parse_ints(args.etas)
    if args.steps < 2:
        raise ConfigError(f"--steps {args.steps}: at least 2, the steady-state window starts after step 1")
    if args.repeats < 1:
        raise ConfigError(f"--repeats {args.repeats}: at least 1")
    start = start_of(args)
    repeats = []
    for rep in range(args.repeats):
        suffix = f"-r{rep + 1}" if rep else ""  # the first repeat's arms are shared with `bench staleness`
        repeats.append(
            {
                eta: run_arm(
                    args.run_dir,
                    f"eta{eta}-decoupled{suffix}",
                    args.config,
                    start,
                    arm_overrides(args, eta),
                    args.poll_s,
                ).summary()
                for eta in etas
            }
        )
    result = analyze(*repeats)
    result["command"] = command_line()
    result["steps"] = args.steps
    result["plots"] = plot(result, args.run_dir, args.figures_dir)
    write_json(args.run_dir, "async", result)
    print("\n" + render(result), flush=True)
    return 0
