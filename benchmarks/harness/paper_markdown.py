"""The paper bench's report writer: the markdown tables (EM and F1 by question type, where
multi-hop questions were lost, generation and training cost, the comparison with the run each
started from), the sign tests in words, the targets, and the plot of EM by type."""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional

from .output import markdown_table, new_figure, save_figure
from .paper_runs import REWARD_WINDOW
from .paper_stats import MULTI_HOP, of_type


def _types(rep: dict) -> List[str]:
    return sorted({t for a in rep["arms"].values() for r in a["runs"] for t in r["rl"]["by_type"]})


def _pair(p: dict) -> str:
    return "n/a" if p["p"] is None else f"{p['fixed']} / {p['broken']} (p {p['p']:.2g})"


def num(x, fmt: str = ",.0f") -> str:
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
        f"{of_type(src['rl'], MULTI_HOP, 'em'):.1f} -> **{of_type(rl, MULTI_HOP, 'em'):.1f}**",
        f"{src['rl']['em']:.1f} -> **{rl['em']:.1f}**",
        _pair(src["vs_source"]),
        _pair(src["vs_source_" + MULTI_HOP]),
        _trend(src["reward"]),
    ]


def _run_rows(arm: str, r: dict, types: List[str]) -> Dict[str, list]:
    """One run's row of each table of the report (`chain` only where `MULTI_HOP` questions were
    asked, `source` only for a run of `--rl-from`)."""
    sft, rl = r["sft"], r["rl"]
    rows = {
        "em": [arm, r["seed"]]
        + [f"{of_type(sft, t, 'em'):.1f} -> **{of_type(rl, t, 'em'):.1f}**" for t in types]
        + [f"{sft['em']:.1f} -> **{rl['em']:.1f}**", _pair(r["rl_vs_sft"]), _pair(r["rl_vs_sft_" + MULTI_HOP])],
        "f1": [arm, r["seed"]]
        + [f"{of_type(sft, t, 'f1'):.1f} -> {of_type(rl, t, 'f1'):.1f}" for t in types]
        + [f"{sft['f1']:.1f} -> {rl['f1']:.1f}"],
        "cost": [arm, r["seed"], f"{sft['searches']:.2f} -> {rl['searches']:.2f}"]
        + [num(of_type(rl, t, "mean_prefill_tokens", None)) for t in types]
        + [
            num(rl["prefill_tokens"]),
            num(of_type(rl, MULTI_HOP, "mean_decode_tokens", None)),
            num(rl.get("decode_tokens")),
            num(rl["peak_context"], "d"),
            " / ".join(f"{x:.0f}" for x in rl["context_by_turn"]),
        ],
    }
    if MULTI_HOP in types:
        rows["chain"] = (
            [arm, r["seed"]]
            + [
                f"{num(of_type(sft, MULTI_HOP, key, None), '.1f')} -> {num(of_type(rl, MULTI_HOP, key, None), '.1f')}"
                for key in ("first_hop_in_search_rate", "golden_in_search_rate", "em")
            ]
            + [
                f"{num(of_type(sft, MULTI_HOP, 'mean_hops_found', None), '.2f')} -> "
                f"{num(of_type(rl, MULTI_HOP, 'mean_hops_found', None), '.2f')}"
            ]
        )
    lc, st = r["learner"], r["stage_s"]
    rows["train"] = [
        arm,
        r["seed"],
        num(lc["sft_steps"]),
        num(None if lc.get("sft_tokens") is None else lc["sft_tokens"] / 1e6, ".2f"),
        lc["steps"],
        num(lc["tokens_per_traj"]),
        num(lc["step_s"], ".2f"),
        _trend(r.get("reward")),  # absent from records kept before it was
        f"{st.get('sft', 0) / 60:.1f} / {st.get('rl', 0) / 60:.1f} / {r['wall_s'] / 60:.1f}",
    ]
    if r.get("rl_from"):
        rows["source"] = _source_row(arm, r)
    return rows


def _tables(types: List[str], rows: Dict[str, List[list]]) -> List[str]:
    """The report's tables, each under the sentence that says what it holds."""
    lines = ["Held-out test EM (%) by question type, after SFT -> after RL (greedy):", ""]
    heads = ["workflow", "seed", *types, "all", "RL vs SFT: fixed / broke", f"on {MULTI_HOP}"]
    lines += [markdown_table(heads, rows["em"]), "", "F1 (%), after SFT -> after RL:", ""]
    lines += [markdown_table(["workflow", "seed", *types, "all"], rows["f1"]), ""]
    if MULTI_HOP in types:
        lines += [
            f"Where {MULTI_HOP} questions were lost (% of them, after SFT -> after RL): a search returned the first "
            "hop's passage (one naming the bridge entity, other than the bridge's own), a search returned the answer "
            "(the second hop's), answered right; and how many hops of the chain the searches followed in order (the "
            "passage of each entity naming the next, the last naming the answer; - where not recorded):",
            "",
        ]
        heads = ["workflow", "seed", "first hop found", "answer found", "EM", "hops followed (mean)"]
        lines += [markdown_table(heads, rows["chain"]), ""]
    lines += [
        "Generation cost on the test questions (greedy; after RL; prefill: the prompt tokens of every generation "
        "request of a question, summed, i.e. what a generator without a prefix cache prefills; decode: the tokens "
        "the model generated, memory rewrites included; - where the run did not record it):",
        "",
    ]
    heads = ["workflow", "seed", "searches / question (SFT -> RL)"]
    heads += [f"prefill / {t} question" for t in types] + ["prefill / question", f"decode / {MULTI_HOP} question"]
    heads += ["decode / question", "peak context", "mean context by turn"]
    lines += [markdown_table(heads, rows["cost"]), ""]
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
    lines += [markdown_table(heads, rows["train"]), ""]
    if rows["source"]:
        lines += [
            "Against the run each started from (`--rl-from`: the same SFT model and start evaluation, then RL of "
            "its own): RL steps there -> here, EM after RL there -> here, right here and wrong there / the reverse "
            f"(sign test), and the training reward there ({REWARD_WINDOW} steps before its last {REWARD_WINDOW} -> "
            "its last; a rise: it was still learning when it stopped):",
            "",
        ]
        heads = ["workflow", "seed", "RL steps", f"{MULTI_HOP} EM", "all EM", "fixed / broke", f"on {MULTI_HOP}"]
        lines += [markdown_table([*heads, "reward there"], rows["source"]), ""]
    return lines


def _sign_tests(rep: dict) -> List[str]:
    """The pooled and head-to-head sign tests, one sentence each."""
    lines = []
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
    return lines


def markdown(rep: dict) -> str:
    """The report: its tables, the sign tests in words, the targets and the command."""
    types = _types(rep)
    rows: Dict[str, List[list]] = {k: [] for k in ("em", "f1", "chain", "cost", "train", "source")}
    for arm, a in rep["arms"].items():
        for r in a["runs"]:
            for table, row in _run_rows(arm, r, types).items():
                rows[table].append(row)
    lines = _tables(types, rows) + _sign_tests(rep)
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
            ems = [of_type(r[stage], t, "em") for r in rep["arms"][arm]["runs"]]
            color = f"C{list(rep['arms']).index(arm)}"
            ax.bar(i, statistics.mean(ems), color=color, alpha=0.45 if stage == "sft" else 0.9)
            ax.plot([i] * len(ems), ems, "k.", markersize=4)
        ax.set_xticks(range(len(bars)), [f"{arm}\n{stage.upper()}" for arm, stage in bars], fontsize=7)
        ax.set_title(t)
        ax.set_ylabel("held-out EM (%)")
    return save_figure(fig, out_dir, name)
