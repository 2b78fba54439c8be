"""`python -m benchmarks cost`: what a bridge question costs each workflow as its hop count grows.

The paper's efficiency claim is that MemSearcher's context stays flat while ReAct's grows. On
the 2-hop questions of `python -m benchmarks paper` MemSearcher still prefills more than ReAct
(two requests per searching turn, each from the system prompt); this bench says at which hop
count that turns round, from a model fitted to measurement and checked against it.

Measurement: for each horizon k the recipe's world with `world.hops=k` (and the turn and token
limits of `recipe.horizon_overrides`), its tokenizer and BM25 index, built by the real pipeline
(`TrainPipeline.prepare`); then each workflow's oracle (`rollout/oracle.py`, no mistakes) runs
through the real workflow, tool and retriever on the world's first N bridge questions, and
every generation request is read from the context rows it wrote: its prompt (the context it
saw) and its generated tokens. Per question: prefill (prompt tokens of every request, summed,
the rule of `mean_prefill_tokens`), decode (generated tokens) and learner tokens (the tokens of
its context rows).

The model (every term a quadratic in the hop count k; `docs/paper_comparison.md`, "Cost by
horizon"), fitted by least squares to the requests of the `--fit-hops` horizons only, so the
other horizons are predictions:

- ReAct, n = k - s searches (s: searches the oracle skips because an earlier search already
  returned the passage): the action prompt at turn t is P_R + q_R k + g t (the question grows
  by q_R tokens a hop, the context by g a searching turn), so prefill = sum over t = 0..n of
  that = (n + 1)(P_R + q_R k) + g n(n + 1)/2; decode = n a_R + f_R; learner = P_R + q_R k + g n + f_R.
- MemSearcher, n = k searches: action prompt P_M + q_M k + u t (u: memory growth a turn),
  memory-rewrite prompt Q + q_Q k + v t, memory written w + x t, so prefill = (n + 1)(P_M +
  q_M k) + u n(n + 1)/2 + n(Q + q_Q k) + v n(n - 1)/2; decode = n a_M + n w + x n(n - 1)/2 + f_M;
  learner = n(Q + q_Q k + w) + (v + x) n(n - 1)/2 + P_M + q_M k + u n + f_M.

The crossing of a metric is the largest real root of ReAct's polynomial minus MemSearcher's
when that difference grows without bound (MemSearcher cheaper beyond it), "never" when it does
not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from numpy.polynomial import Polynomial

from .arms import parse_ints
from .output import PROG, command_line, markdown_table, write_report
from .recipe import add_recipe_option, horizon_overrides, recipe_files

HELP = "cost by horizon: prefill, decode and learner tokens per bridge question of 2..8 hops, model vs measurement"
WORKFLOWS = ("memsearcher", "react")
METRICS = ("prefill", "decode", "learner")
MIN_ANSWERED = 0.95  # of a horizon's questions, by each oracle


# ---- what one question's rows say ----
@dataclass(frozen=True)
class Request:
    """One generation request of an episode, as its context row shows it."""

    turn: int  # the episode's turn (MemSearcher: the row's; ReAct: the action's index)
    kind: str  # "action" (a search or the answer) or "memory" (MemSearcher's rewrite)
    prompt: int  # tokens of the context it was sent with
    generated: int  # tokens it generated (the loss-masked span)
    final: bool  # the answer, the episode's last request


def spans(loss_mask: Sequence[int]) -> List[Tuple[int, int]]:
    """(start, length) of each generated span of a row's response: each was one request, whose
    prompt was everything before it (the rule of `prefill_tokens` in the workflows' base)."""
    out: List[Tuple[int, int]] = []
    for i, m in enumerate(loss_mask):
        if m and (i == 0 or not loss_mask[i - 1]):
            out.append((i, 0))
        if m:
            out[-1] = (out[-1][0], out[-1][1] + 1)
    return out


def requests_of(rows: Sequence[dict], workflow: str) -> List[Request]:
    """The requests of one question's context rows (turn order). MemSearcher: a row a turn, its
    first span the action, a second the memory rewrite. ReAct: one row, a span a turn."""
    out: List[Request] = []
    for row in sorted(rows, key=lambda r: r["turn"]):
        last_row = bool(row["is_final"])
        parts = spans(row["loss_mask"])
        for j, (start, n) in enumerate(parts):
            turn = row["turn"] if workflow == "memsearcher" else j
            kind = "memory" if workflow == "memsearcher" and j == 1 else "action"
            final = last_row and j == len(parts) - 1
            out.append(Request(turn, kind, row["prompt_len"] + start, n, final))
    return out


@dataclass
class Measured:
    """Means per question of one workflow at one horizon."""

    hops: int
    questions: int  # answered by the oracle (the measured ones)
    searches: float
    prefill: float
    decode: float
    learner: float
    context_by_turn: List[float]  # the action prompt's mean length by turn


def measure(rows_by_question: Dict[str, List[dict]], workflow: str, hops: int) -> Tuple[Measured, List[Request]]:
    """Per-question means over `rows_by_question` (question id -> its context rows), and every request."""
    reqs: List[Request] = []
    totals = {m: 0.0 for m in METRICS}
    searches = 0
    by_turn: Dict[int, List[int]] = {}
    for rows in rows_by_question.values():
        rs = requests_of(rows, workflow)
        reqs += rs
        totals["prefill"] += sum(r.prompt for r in rs)
        totals["decode"] += sum(r.generated for r in rs)
        totals["learner"] += sum(len(row["input_ids"]) for row in rows)
        searches += sum(1 for r in rs if r.kind == "action" and not r.final)
        for r in rs:
            if r.kind == "action":
                by_turn.setdefault(r.turn, []).append(r.prompt)
    n = len(rows_by_question)
    return (
        Measured(
            hops,
            n,
            searches / n,
            totals["prefill"] / n,
            totals["decode"] / n,
            totals["learner"] / n,
            [sum(v) / len(v) for _, v in sorted(by_turn.items())],
        ),
        reqs,
    )


# ---- the model ----
@dataclass
class ReActFit:
    P: float  # action prompt at turn 0 less the question's hop-dependent part
    q: float  # question tokens a hop
    g: float  # context growth a searching turn (the action and its tool response)
    a: float  # tokens of a searching action
    f: float  # tokens of the answer
    s: float  # searches skipped a question (an earlier search returned the passage)

    def costs(self, k: Polynomial) -> Dict[str, Polynomial]:
        n = k - self.s
        prompt = self.P + self.q * k
        return {
            "prefill": (n + 1) * prompt + self.g * n * (n + 1) / 2,
            "decode": self.a * n + self.f,
            "learner": prompt + self.g * n + self.f,
        }


@dataclass
class MemSearcherFit:
    P: float  # action prompt at turn 0 (empty memory) less the question's hop-dependent part
    q: float  # question tokens a hop, in the action prompt
    u: float  # action prompt growth a turn (the memory's)
    Q: float  # memory-rewrite prompt at turn 0 less the question's part
    qQ: float  # question tokens a hop, in the rewrite prompt
    v: float  # rewrite prompt growth a turn
    w: float  # memory written at turn 0
    x: float  # memory written: growth a turn
    a: float  # tokens of a searching action
    f: float  # tokens of the answer

    def costs(self, k: Polynomial) -> Dict[str, Polynomial]:
        n = k
        prompt, rewrite = self.P + self.q * k, self.Q + self.qQ * k
        return {
            "prefill": (n + 1) * prompt + self.u * n * (n + 1) / 2 + n * rewrite + self.v * n * (n - 1) / 2,
            "decode": self.a * n + self.w * n + self.x * n * (n - 1) / 2 + self.f,
            "learner": n * (rewrite + self.w) + (self.v + self.x) * n * (n - 1) / 2 + prompt + self.u * n + self.f,
        }


K = Polynomial([0.0, 1.0])  # the hop count, the variable of every cost


def _lstsq(columns: List[List[float]], y: List[float], key: str) -> List[float]:
    if len(y) < len(columns):
        raise ValueError(f"too few requests to fit {key} ({len(y)} for {len(columns)} parameters)")
    a = np.array(columns, dtype=float).T
    coef, *_ = np.linalg.lstsq(a, np.array(y, dtype=float), rcond=None)
    return [float(c) for c in coef]


def _mean(values: List[float], key: str) -> float:
    if not values:
        raise ValueError(f"no request to fit {key}")
    return sum(values) / len(values)


def fit_react(reqs: List[Tuple[int, Request]], searches: Dict[int, float]) -> ReActFit:
    """`reqs`: (hops, request) of the fitted horizons; `searches`: mean searches by hops."""
    acts = [(k, r) for k, r in reqs if r.kind == "action"]
    P, q, g = _lstsq(
        [[1.0] * len(acts), [k for k, _ in acts], [r.turn for _, r in acts]],
        [r.prompt for _, r in acts],
        "ReAct's prompts",
    )
    return ReActFit(
        P,
        q,
        g,
        _mean([r.generated for _, r in acts if not r.final], "ReAct's searching actions"),
        _mean([r.generated for _, r in acts if r.final], "ReAct's answers"),
        _mean([k - n for k, n in searches.items()], "ReAct's searches"),
    )


def fit_memsearcher(reqs: List[Tuple[int, Request]]) -> MemSearcherFit:
    acts = [(k, r) for k, r in reqs if r.kind == "action"]
    mems = [(k, r) for k, r in reqs if r.kind == "memory"]
    P, q, u = _lstsq(
        [[1.0] * len(acts), [k for k, _ in acts], [r.turn for _, r in acts]],
        [r.prompt for _, r in acts],
        "MemSearcher's prompts",
    )
    Q, qQ, v = _lstsq(
        [[1.0] * len(mems), [k for k, _ in mems], [r.turn for _, r in mems]],
        [r.prompt for _, r in mems],
        "MemSearcher's rewrites",
    )
    w, x = _lstsq(
        [[1.0] * len(mems), [r.turn for _, r in mems]], [r.generated for _, r in mems], "MemSearcher's memories"
    )
    return MemSearcherFit(
        P,
        q,
        u,
        Q,
        qQ,
        v,
        w,
        x,
        _mean([r.generated for _, r in acts if not r.final], "MemSearcher's searching actions"),
        _mean([r.generated for _, r in acts if r.final], "MemSearcher's answers"),
    )


def fit(
    measured: Dict[str, Dict[int, Measured]], reqs: Dict[str, List[Tuple[int, Request]]], hops: List[int]
) -> Dict[str, object]:
    """Both workflows' models fitted to the requests of the horizons `hops` only."""
    chosen = {wf: [(h, r) for h, r in reqs[wf] if h in hops] for wf in WORKFLOWS}
    return {
        "react": fit_react(chosen["react"], {h: measured["react"][h].searches for h in hops}),
        "memsearcher": fit_memsearcher(chosen["memsearcher"]),
    }


def crossing(memsearcher: Polynomial, react: Polynomial) -> Optional[float]:
    """The hop count beyond which MemSearcher's cost stays below ReAct's: the largest real root
    of ReAct's minus MemSearcher's when that difference grows without bound (0.0 when it has no
    real root: cheaper at every horizon); None (never) when it does not grow."""
    d = (react - memsearcher).trim(tol=1e-9)
    lead = float(d.coef[-1])
    if d.degree() == 0:
        return 0.0 if lead > 0 else None
    if lead <= 0:
        return None
    real = [float(r.real) for r in d.roots() if abs(r.imag) < 1e-9]
    return max([0.0, *real])


def measured_crossing(ms: Dict[int, float], react: Dict[int, float]) -> Optional[Tuple[Optional[int], int]]:
    """(the last measured horizon where MemSearcher costs at least ReAct's, or None, and the first
    from which it costs less at every measured horizon); None when it is not cheaper at the longest."""
    hops = sorted(set(ms) & set(react))
    cheaper = [h for h in hops if ms[h] < react[h]]
    if not hops or hops[-1] not in cheaper:
        return None
    first = hops[-1]
    for h in reversed(hops):
        if h not in cheaper:
            break
        first = h
    before = [h for h in hops if h < first]
    return (before[-1] if before else None, first)


# ---- the bench ----
def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_recipe_option(parser)
    parser.add_argument("--hops", default="2,3,4,6,8", help="comma-separated horizons to measure (default %(default)s)")
    parser.add_argument(
        "--fit-hops",
        default="2,3",
        help="the horizons the model is fitted to (default %(default)s); the others are its predictions",
    )
    parser.add_argument("--questions", type=int, default=200, help="bridge questions a horizon (train split)")
    parser.add_argument("--run-dir", default="runs/cost", help="h<k>/ worlds, models, indexes, demonstrations, report")
    parser.add_argument("--report-dir", default="", help="also write the report here (e.g. docs/reports)")
    parser.add_argument("--name", default="cost_by_horizon", help="report file name")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override for every horizon")


def measure_horizon(configs: List[str], run_dir: str, hops: int, questions: int, overrides: List[str]) -> dict:
    """Both workflows' oracles at one horizon: {workflow: (Measured, requests)}."""
    from areal_mem.app.demonstrations import write_demonstrations
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import load_run

    base = [*overrides, f"run_dir={run_dir}", *horizon_overrides(hops)]
    TrainPipeline(load_run(configs, base), evaluate=False).prepare()  # world, model (tokenizer), index
    answered: Dict[str, Dict[str, List[dict]]] = {}
    for wf in WORKFLOWS:
        cfg = load_run(configs, [*base, f"rollout.workflow={wf}"])
        path = os.path.join(run_dir, f"{wf}_demos.jsonl")
        stats = write_demonstrations(
            cfg, path, limit=questions, mistake_rate=0.0, progress=False, question_type="bridge"
        )
        by_q: Dict[str, List[dict]] = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                by_q.setdefault(row["group_id"], []).append(row)
        # a question the oracle did not answer is left out: its episode searched the same title
        # until the turns ran out (BM25's top 2 for a person's name can be two of their works),
        # which is the retriever's cost, not the plan's. Few are: a limit that cut episodes short
        # would leave out many, and is named
        answered[wf] = {q: rs for q, rs in by_q.items() if any(r["is_final"] and r["reward"] == 1.0 for r in rs)}
        if len(answered[wf]) < MIN_ANSWERED * len(by_q):
            raise SystemExit(
                f"{PROG} cost: {wf}'s oracle answered {stats['em']:.1%} of the {hops}-hop questions; the turn or "
                f"token limits ({' '.join(horizon_overrides(hops)[1:])}) cut its episodes short"
            )
    both = set.intersection(*(set(a) for a in answered.values()))  # the same questions for both
    return {wf: measure({q: rs for q, rs in answered[wf].items() if q in both}, wf, hops) for wf in WORKFLOWS}


def report(
    measured: Dict[str, Dict[int, Measured]],
    fits: Dict[str, object],
    fit_hops: List[int],
    command: str,
    every: Optional[Dict[str, object]] = None,
) -> dict:
    """Predicted against measured per horizon, the fitted numbers, and where MemSearcher becomes
    cheaper by each metric: predicted by the model of `fits`, by the same model fitted to every
    horizon (`every`), and measured; for prefill also where it costs at most half of ReAct's
    (the paper comparison's `--target-prefill-ratio`)."""
    costs = {wf: fits[wf].costs(K) for wf in WORKFLOWS}  # type: ignore[attr-defined]
    rows = []
    for h in sorted(measured["react"]):
        row: dict = {"hops": h, "fitted": h in fit_hops}
        for wf in WORKFLOWS:
            m = measured[wf][h]
            row[wf] = {
                "questions": m.questions,  # the oracle answered (measured) of the horizon's --questions
                "searches": m.searches,
                "context_by_turn": m.context_by_turn,
                **{f"{x}_measured": getattr(m, x) for x in METRICS},
                **{f"{x}_predicted": float(costs[wf][x](h)) for x in METRICS},
            }
        rows.append(row)
    cross = {}
    for x in METRICS:
        meas = measured_crossing(
            {h: getattr(m, x) for h, m in measured["memsearcher"].items()},
            {h: getattr(m, x) for h, m in measured["react"].items()},
        )
        cross[x] = {
            "predicted": crossing(costs["memsearcher"][x], costs["react"][x]),
            "measured": list(meas) if meas else None,
            "memsearcher_poly": [float(c) for c in costs["memsearcher"][x].coef],
            "react_poly": [float(c) for c in costs["react"][x].coef],
        }
        if every is not None:
            all_costs = {wf: every[wf].costs(K) for wf in WORKFLOWS}  # type: ignore[attr-defined]
            cross[x]["predicted_fit_all"] = crossing(all_costs["memsearcher"][x], all_costs["react"][x])
    half = measured_crossing(
        {h: 2 * m.prefill for h, m in measured["memsearcher"].items()},
        {h: m.prefill for h, m in measured["react"].items()},
    )
    cross["half_prefill"] = {
        "predicted": crossing(2 * costs["memsearcher"]["prefill"], costs["react"]["prefill"]),
        "measured": list(half) if half else None,
    }
    if every is not None:
        all_costs = {wf: every[wf].costs(K) for wf in WORKFLOWS}  # type: ignore[attr-defined]
        cross["half_prefill"]["predicted_fit_all"] = crossing(
            2 * all_costs["memsearcher"]["prefill"], all_costs["react"]["prefill"]
        )
    return {
        "command": command,
        "fit_hops": fit_hops,
        "fits": {wf: asdict(fits[wf]) for wf in WORKFLOWS},  # type: ignore[call-overload]
        "horizons": rows,
        "crossing": cross,
    }


def _pred_text(p: Optional[float]) -> str:
    return "never" if p is None else ("every horizon" if p == 0.0 else f"k > {p:.2f} (from {math.floor(p) + 1} hops)")


def _cross_text(c: dict) -> Tuple[str, str, str]:
    pred, pred_all = _pred_text(c["predicted"]), _pred_text(c.get("predicted_fit_all"))
    m = c["measured"]
    if m is None:
        meas = "not within the measured horizons"
    elif m[0] is None:
        meas = f"cheaper from the shortest measured ({m[1]} hops)"
    else:
        meas = f"between {m[0]} and {m[1]} hops"
    return pred, pred_all if "predicted_fit_all" in c else "-", meas


def markdown(rep: dict) -> str:
    heads = [
        "hops",
        "workflow",
        "questions",
        "searches",
        "prefill pred / meas",
        "decode pred / meas",
        "learner pred / meas",
    ]
    rows = []
    for r in rep["horizons"]:
        tag = f"{r['hops']}" + (" (fit)" if r["fitted"] else "")
        for wf in WORKFLOWS:
            c = r[wf]
            rows.append(
                [tag, wf, c["questions"], f"{c['searches']:.2f}"]
                + [f"{c[x + '_predicted']:,.0f} / {c[x + '_measured']:,.0f}" for x in METRICS]
            )
        ms, re_ = r["memsearcher"], r["react"]
        rows.append(
            [tag, "MemSearcher / ReAct", "", ""]
            + [
                f"{ms[x + '_predicted'] / re_[x + '_predicted']:.2f} / {ms[x + '_measured'] / re_[x + '_measured']:.2f}"
                for x in METRICS
            ]
        )
    lines = [
        "Per bridge question, the oracles without mistakes (model fitted to the horizons marked fit):",
        "",
        markdown_table(heads, rows),
        "",
    ]
    f = rep["fits"]
    lines.append(
        "Fitted (tokens): ReAct "
        + ", ".join(f"{k} {v:.2f}" for k, v in f["react"].items())
        + "; MemSearcher "
        + ", ".join(f"{k} {v:.2f}" for k, v in f["memsearcher"].items())
        + "."
    )
    names = {x: f"{x}: MemSearcher's below ReAct's" for x in METRICS}
    names["half_prefill"] = "prefill: MemSearcher's at most half ReAct's"
    heads = [
        "where",
        f"predicted (fit to {','.join(map(str, rep['fit_hops']))} hops)",
        "predicted (fit to all)",
        "measured",
    ]
    lines += ["", markdown_table(heads, [[names[x], *_cross_text(c)] for x, c in rep["crossing"].items()])]
    lines += ["", "Mean action context by turn (tokens):", ""]
    ctx_rows = [
        [r["hops"], wf, " / ".join(f"{x:.0f}" for x in r[wf]["context_by_turn"])]
        for r in rep["horizons"]
        for wf in WORKFLOWS
    ]
    lines += [markdown_table(["hops", "workflow", "context by turn"], ctx_rows), "", f"`{rep['command']}`"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    configs = recipe_files(args)
    hops, fit_hops = parse_ints(args.hops), parse_ints(args.fit_hops)
    if not hops or not set(fit_hops) <= set(hops) or len(set(fit_hops)) < 2:
        raise SystemExit(f"{PROG} cost: --fit-hops must name at least two of the --hops horizons {hops}")
    measured: Dict[str, Dict[int, Measured]] = {wf: {} for wf in WORKFLOWS}
    reqs: Dict[str, List[Tuple[int, Request]]] = {wf: [] for wf in WORKFLOWS}
    for h in hops:
        by_wf = measure_horizon(configs, os.path.join(args.run_dir, f"h{h}"), h, args.questions, args.overrides)
        for wf, (m, rs) in by_wf.items():
            measured[wf][h] = m
            reqs[wf] += [(h, r) for r in rs]
        print(f"[bench cost] {h} hops measured", flush=True)
    fits = fit(measured, reqs, fit_hops)
    every = fit(measured, reqs, hops)  # the same model fitted to every measured horizon
    rep = report(measured, fits, fit_hops, command_line(), every)
    text = markdown(rep)
    print(text)
    write_report([args.run_dir, args.report_dir], args.name, rep, text)
    return 0
