"""The paper bench's horizons (`--hops`): one row per horizon and workflow of each horizon's
report, MemSearcher's costs over ReAct's, and the hop count where its prefill falls below
ReAct's."""

from __future__ import annotations

import re
import statistics
from typing import Dict, List, Optional, Tuple

from .output import PROG, markdown_table
from .paper_markdown import num
from .paper_stats import MULTI_HOP, of_type
from .recipe import horizon_overrides


def _mean(values: List[Optional[float]]) -> Optional[float]:
    """The mean, or None when a run did not record the number (a 0 would pass for a measured cost)."""
    return statistics.mean(values) if values and None not in values else None  # type: ignore[type-var]


# the costs compared per horizon: (row key, what it is read from in a run's record)
HORIZON_COSTS = {
    "prefill": lambda r: of_type(r["rl"], MULTI_HOP, "mean_prefill_tokens", None),
    "decode": lambda r: of_type(r["rl"], MULTI_HOP, "mean_decode_tokens", None),
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
                "em_sft": statistics.mean(of_type(r["sft"], MULTI_HOP, "em") for r in runs),
                "em_rl": statistics.mean(of_type(r["rl"], MULTI_HOP, "em") for r in runs),
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
            num(r["prefill"]),
            num(r["decode"]),
            num(r["learner"]),
            ", ".join(num(r[f"{key}_ratio"], ".2f") for key in HORIZON_COSTS) if "prefill_ratio" in r else "",
            ", ".join(f"{s}: {x:.2f}" for s, x in r.get("prefill_ratio_by_seed", {}).items()),
            num(None if r["sft_tokens"] is None else r["sft_tokens"] / 1e6, ".2f"),
            num(r["peak_context"], "d"),
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


def refuse_horizon_keys(overrides: List[str]) -> None:
    """With --hops the bench sets the horizon's keys (`horizon_overrides`); an override of one
    would run another horizon under its name."""
    keys = {o.partition("=")[0] for o in horizon_overrides(2)}
    for item in overrides:
        key = re.sub(r"\[([^\]]*)\]", r".\1", item.partition("=")[0]).strip().lstrip("+~")
        if key in keys:
            raise SystemExit(f"{PROG} paper: override {item!r}: with --hops the bench sets {key} per horizon")
