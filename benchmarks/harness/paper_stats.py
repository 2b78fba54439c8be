"""The paper bench's statistics: paired sign tests over the same questions (RL against SFT,
MemSearcher against ReAct, a run against the one it started from), pooled over seeds, and the
recipe's targets judged on them; `report` gathers them into the report's data."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from .paired import fixed_broken, pooled, sign_test_p
from .paper_records import same_world

MULTI_HOP = "bridge"  # the question type the targets are about


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


NO_PAIR = {"fixed": None, "broken": None, "p": None}


def answer_column(ans: Dict[str, list], column: int, qtype: Optional[str] = None) -> Dict[str, float]:
    """One column of a run's answers (`paper_runs.answers`: 1 after SFT, 2 after RL), only `qtype`'s
    questions if given."""
    return {q: a[column] for q, a in ans.items() if qtype is None or a[0] == qtype}


def paired(before: Dict[str, float], after: Dict[str, float]) -> dict:
    """Questions right only in `after` (fixed) and only in `before` (broken), with the sign test."""
    try:
        fixed, broken = fixed_broken(before, after)
    except ValueError:
        return dict(NO_PAIR)
    return {"fixed": fixed, "broken": broken, "p": sign_test_p(fixed, broken)}


def of_type(ev: dict, qtype: str, key: str, default=0.0):
    """`key` of one evaluation's `qtype` questions; `default` where it has none (or did not record it)."""
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
    rows = [
        (s, of_type(ms[s]["sft"], MULTI_HOP, "em"), of_type(ms[s]["rl"], MULTI_HOP, "em")) for s in seeds if s in ms
    ]
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
            m_em, r_em = of_type(m, MULTI_HOP, "em"), of_type(r, MULTI_HOP, "em")
            m_pre, r_pre = (
                of_type(m, MULTI_HOP, "mean_prefill_tokens", None),
                of_type(r, MULTI_HOP, "mean_prefill_tokens", None),
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
            r = paired(answer_column(b["answers"], 2, qtype), answer_column(a["answers"], 2, qtype))
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
