"""`python -m benchmarks async`: the debug recipe synchronous (eta 0) against asynchronous (eta 2, 4).

Same start, same steps, generator and learner pinned to separate cores where the machine has
two. Throughput is measured over the steady-state window of each arm (`arms.summarize`); the
machine bound `(t_gen + t_train) / max(t_gen, t_train)` comes from the synchronous arm's
generator busy seconds per step and learner compute seconds per step: what overlapping the two
could gain at most.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from areal_mem.config import ConfigError

from .arms import add_arm_arguments, arm_overrides, parse_ints, run_arm, start_of
from .output import command_line, markdown_table, new_figure, save_figure, write_json

HELP = "async vs sync: the debug recipe at max_staleness 0, 2, 4; throughput, idle time, bound"
NEEDS = ("matplotlib",)


@dataclass(frozen=True)
class AsyncTargets:
    """What the asynchronous row (`eta`) is judged against, when the baseline is synchronous
    (eta 0); the `--target-*` options, these their defaults. The last three are judged on every
    repeat: a median can hide one slow repeat."""

    eta: int = 2
    speedup: float = 1.5  # median groups/s over the synchronous arm's, at least
    idle: float = 0.10  # the generator's idle share of wall time, below
    bound_share: float = 0.90  # of the repeat's machine bound, at least
    reprefill: float = 0.05  # prefill tokens prefilled again (aborted or retracted requests), below


@dataclass
class Target:
    """One target, judged on every repeat (one run: one repeat); a repeat that did not measure
    the figure (None) fails it: nothing unmeasured is called met."""

    target: str
    per_repeat: List[Optional[float]]
    met: bool


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    d = AsyncTargets()
    parser.add_argument(
        "--target-eta", type=int, default=d.eta, help="the staleness bound the targets judge (default %(default)s)"
    )
    parser.add_argument(
        "--target-speedup",
        type=float,
        default=d.speedup,
        help="its throughput over eta 0's, at least (median) (default %(default)s)",
    )
    parser.add_argument(
        "--target-idle", type=float, default=d.idle, help="its generator idle share, below (default %(default)s)"
    )
    parser.add_argument(
        "--target-bound-share",
        type=float,
        default=d.bound_share,
        help="its share of the machine bound, at least (default %(default)s)",
    )
    parser.add_argument(
        "--target-reprefill",
        type=float,
        default=d.reprefill,
        help="its re-prefilled share of prefill tokens, below (default %(default)s)",
    )


def targets_of(args: argparse.Namespace) -> AsyncTargets:
    return AsyncTargets(
        args.target_eta, args.target_speedup, args.target_idle, args.target_bound_share, args.target_reprefill
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_arm_arguments(parser)
    parser.add_argument("--etas", default="0,2,4", help="staleness bounds; the first is the baseline")
    parser.add_argument(
        "--repeats", type=int, default=1, help="run the arms this many times, interleaved; figures are medians"
    )
    parser.add_argument("--figures-dir", default="", help="also copy the plot here (docs/figures)")
    add_target_arguments(parser)


def analyze(*repeats: Dict[int, Dict[str, float]], targets: AsyncTargets = AsyncTargets()) -> dict:
    """Speed-ups against the first arm and the machine bound from its per-step times.

    With several repeats (each `{eta: summary}`, run interleaved), every figure is the median
    over the repeats, and a speed-up is the median of each repeat's own ratio: arms that ran
    side by side share the machine's drift. `targets` judge the row of `targets.eta`.
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
    out["thresholds"] = asdict(targets)
    if t_gen is not None:
        out["bound"] = _bound(base)
        # When training is the slower side, the staleness bound stops rollouts for the rest of
        # each step: the generator idles at least this share however large eta is.
        out["idle_floor"] = max(0.0, 1.0 - t_gen / t_train)
    judged = next((r for r in rows if r["eta"] == targets.eta), None)
    if judged is not None and etas[0] == 0:
        out["target_met"] = bool(
            judged["speedup"] >= targets.speedup and judged.get("gen_idle_frac", 1.0) < targets.idle
        )
        if "bound" in out:
            out["targets"] = [asdict(t) for t in repeat_targets(judged, out["bound"], targets)]
    return out


def repeat_targets(row: dict, bound: float, targets: AsyncTargets = AsyncTargets()) -> List[Target]:
    """The targets of the row of `targets.eta`, each judged on every repeat (one run: one repeat).

    A target whose figure an arm did not measure (a generator without engine stats) is not met."""
    t = targets
    shares = row.get("bound_fracs") or [row["speedup"] / bound]
    idle = row.get("gen_idle_fracs") or [row.get("gen_idle_frac")]
    again = row.get("gen_reprefill_fracs") or [row.get("gen_reprefill_frac")]

    def target(text: str, values: list, ok) -> Target:
        return Target(text, values, None not in values and all(map(ok, values)))

    return [
        target(
            f"eta {t.eta} at >= {t.bound_share:.0%} of its repeat's machine bound",
            shares,
            lambda v: v >= t.bound_share,
        ),
        target(f"generator idle < {t.idle:.0%} at eta {t.eta}", idle, lambda v: v < t.idle),
        target(f"re-prefill < {t.reprefill:.0%} of prefill tokens at eta {t.eta}", again, lambda v: v < t.reprefill),
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
    t = AsyncTargets(**result.get("thresholds", {}))  # a result written before they were options: the defaults
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
            f"target (eta {t.eta} >= {t.speedup:g}x synchronous, generator idle < "
            f"{100 * t.idle:.0f}%): {'MET' if result['target_met'] else 'NOT met'}"
        )
    if result.get("targets"):
        lines += [
            "",
            "targets (the --target-* options), each judged on every repeat:",
            "",
            markdown_table(
                ["target", "per repeat", "met"],
                [
                    [x["target"], ", ".join(pct(v) for v in x["per_repeat"]), "MET" if x["met"] else "NOT met"]
                    for x in result["targets"]
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
        suffix = f"-r{rep + 1}" if rep else ""  # the first repeat's arms are shared with the `staleness` bench
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
    result = analyze(*repeats, targets=targets_of(args))
    result["command"] = command_line()
    result["steps"] = args.steps
    result["plots"] = plot(result, args.run_dir, args.figures_dir)
    write_json(args.run_dir, "async", result)
    print("\n" + render(result), flush=True)
    return 0
