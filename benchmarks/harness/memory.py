"""`python -m benchmarks memory`: MemSearcher against ReAct on the same questions with the same policy.

The policy is scripted (`AlwaysSearchPolicy`): it searches a corpus title every turn for
`--turns` turns, keeps the last two facts found as its memory, then answers, so both workflows
make the same number of searches and only the context handling differs. Both run against the
real retrieval service with the start model's tokenizer. Per workflow: tokens per context by
turn index, peak context, tokens in the trajectory's context rows (what the learner trains on)
and in its contexts summed over turns (what the generator prefills); then the real learner
(DeepSpeed engine, the decoupled PPO step) trains each trajectory's rows, one trajectory per
step, in a fresh process: seconds per trajectory and the peak resident memory above the
process's after a warm-up step (Adam state allocated), so the two workflows do not share a peak.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from areal_mem.config.rollout import RolloutConfig
from areal_mem.generation import GenerationResult, SamplingParams

from .output import PROG, command_line, markdown_table, new_figure, save_figure, write_json

HELP = "memory vs ReAct: tokens per context by turn, peak context, learner time and memory per trajectory"
NEEDS = ("matplotlib",)
FACTS_KEPT = 2


@dataclass
class LearnerMeasure:
    """What the learner process measured for one workflow's trajectories."""

    seconds: List[float]  # per trajectory step
    peak_mb: float  # peak resident memory above the warmed-up process
    base_mb: float  # the warmed-up process's


@dataclass
class WorkflowCost:
    """Per trajectory of one workflow (means over the questions, peak the largest)."""

    peak_context: int
    row_tokens_per_traj: float  # tokens in the context rows: what the learner trains on
    prefill_tokens_per_traj: float  # context tokens summed over turns: what the generator prefills
    rows_per_traj: float
    learner_s_per_traj: float
    learner_peak_mb: float


class AlwaysSearchPolicy:
    """Searches a random title `turns` times per trajectory (counted per sticky key), then answers."""

    def __init__(self, tokenizer, titles: List[str], turns: int, seed: int = 0):
        self.tok, self.titles, self.turns = tokenizer, titles, turns
        self.rng = random.Random(seed)
        self.actions: Dict[str, int] = defaultdict(int)
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def _text(self, context: str, key: str) -> str:
        from areal_mem.rollout.oracle import read_context, search_call, split_documents

        view = read_context(context)
        if view.phase == "memory":
            facts = [f for f in view.memory.split(" | ") if f]
            for docs in view.responses:
                for title, text in list(split_documents(docs).items())[:1]:
                    facts.append(f"{title}: {re.split(r'(?<=[.!?]) ', text)[0]}")
            return "<memory> " + " | ".join(facts[-FACTS_KEPT:]) + " </memory>"
        self.actions[key] += 1
        if self.actions[key] > self.turns:
            return " I have searched enough. </think> The answer is \\boxed{unknown}."
        return f" Let me search. </think>\n{search_call(self.rng.choice(self.titles))}"

    async def generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: str | None = None, sticky_key: str | None = None
    ) -> GenerationResult:
        text = self._text(self.tok.decode(input_ids, skip_special_tokens=False), sticky_key or "")
        ids = self.tok.encode(text, add_special_tokens=False) + [self.im_end]
        return GenerationResult(ids, [0.0] * len(ids), [0] * len(ids), "stop", prompt_tokens=len(input_ids))


async def run_workflows(
    world: str, model: str, retriever_url: str, questions: int, turns: int, rollout: Optional[RolloutConfig] = None
) -> dict:
    """workflow name -> its trajectories on the first `questions` dev questions; the prompts of
    the `rollout` config (`prompt_style`, `prompt_file`), else the released ones."""
    from transformers import AutoTokenizer

    from areal_mem.config.rollout import RolloutLimits
    from areal_mem.data import read_tasks
    from areal_mem.retriever.client import RetrieverClient
    from areal_mem.rollout.oracle import corpus_titles
    from areal_mem.rollout.rewards.answer_reward import AnswerReward
    from areal_mem.rollout.tools.wikipedia_search import WikipediaSearchTool
    from areal_mem.rollout.workflows.base import WorkflowContext
    from areal_mem.rollout.workflows.memsearcher import MemSearcherWorkflow
    from areal_mem.rollout.workflows.react import ReActWorkflow
    from areal_mem.rollout.workflows.setup import prompt_template

    tok = AutoTokenizer.from_pretrained(model)
    tasks = read_tasks(os.path.join(world, "dev.jsonl"))[:questions]
    titles = sorted(set(corpus_titles(os.path.join(world, "corpus.jsonl")).values()))
    out = {}
    async with RetrieverClient(retriever_url) as retriever:
        tool = WikipediaSearchTool(retriever)
        for workflow in (MemSearcherWorkflow(), ReActWorkflow()):
            ctx = WorkflowContext(
                generator=AlwaysSearchPolicy(tok, titles, turns),
                tokenizer=tok,
                tools={tool.name: tool},
                reward=AnswerReward(),
                sampling=SamplingParams(temperature=0.0),
                limits=RolloutLimits(max_turns=turns + 1, max_context_tokens=1 << 20),
                prompt_template=prompt_template(rollout, workflow) if rollout is not None else "",
            )
            out[workflow.name] = await asyncio.gather(
                *(workflow.run(t, ctx, f"{workflow.name}-{i}") for i, t in enumerate(tasks))
            )
    return out


def turn_table(lengths: Dict[str, List[List[int]]]) -> List[dict]:
    """Mean context tokens per turn index, per workflow, and their ratio (the second over the first)."""
    names = list(lengths)
    rows = []
    for t in range(max(len(x) for runs in lengths.values() for x in runs)):
        row = {"turn": t + 1}
        for name, runs in lengths.items():
            vals = [x[t] for x in runs if len(x) > t]
            row[name] = sum(vals) / len(vals) if vals else 0.0
        row[f"{names[1]}/{names[0]}"] = row[names[1]] / row[names[0]] if row[names[0]] else 0.0
        rows.append(row)
    return rows


def plot_turns(rows: List[dict], run_dir: str, figures_dir: str = "", title: str = "") -> List[str]:
    fig, axes = new_figure()
    ax = axes[0][0]
    turns = [r["turn"] for r in rows]
    ax.plot(turns, [r["memsearcher"] for r in rows], marker="o", label="MemSearcher (fresh context + memory)")
    ax.plot(turns, [r["react"] for r in rows], marker="s", label="ReAct (growing context)")
    ax.set_xlabel("turn")
    ax.set_ylabel("tokens in context (mean)")
    ax.set_title(title or "Context length per turn, scripted always-search policy")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, run_dir, "context_length", figures_dir)


def trajectory_rows(traj) -> List[dict]:
    """The learner rows of one trajectory (advantage 1.0: a real gradient through every token)."""
    from dataclasses import asdict

    from areal_mem.learner.batch import TrainRow

    return [asdict(TrainRow.from_context(c, 1.0)) for c in traj.contexts]


def learner_cost(model: str, rows_path: str, micro_batch_tokens: int, out_path: str) -> None:
    """In a fresh process: seconds per trajectory step and peak RSS above the warmed-up process."""
    import resource
    import time

    from areal_mem.config.learner import LearnerConfig
    from areal_mem.learner.batch import TrainRow
    from areal_mem.learner.engine import LearnerEngine

    with open(rows_path, encoding="utf-8") as f:
        trajs = [[TrainRow(**r) for r in rows] for rows in json.load(f)]
    engine = LearnerEngine(model, LearnerConfig(lr=1e-6, micro_batch_tokens=micro_batch_tokens))
    short = trajs[0][0]
    n = short.prompt_len + 1
    engine.train_step(
        [
            TrainRow(
                short.input_ids[:n],
                short.prompt_len,
                short.loss_mask[:1],
                short.behav_logp[:1],
                short.versions[:1],
                short.advantages[:1],
            )
        ],
        0,
    )  # optimizer state exists
    base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = []
    for rows in trajs:
        t0 = time.perf_counter()
        engine.train_step(rows, 0)
        seconds.append(time.perf_counter() - t0)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(asdict(LearnerMeasure(seconds, (peak_kb - base_kb) / 1024, base_kb / 1024)), f)


def measure_learner(model: str, trajs, work: str, name: str, micro_batch_tokens: int) -> LearnerMeasure:
    import multiprocessing as mp

    rows_path, out_path = os.path.join(work, f"{name}_rows.json"), os.path.join(work, f"{name}_learner.json")
    with open(rows_path, "w", encoding="utf-8") as f:
        json.dump([trajectory_rows(t) for t in trajs], f)
    proc = mp.get_context("spawn").Process(target=learner_cost, args=(model, rows_path, micro_batch_tokens, out_path))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"{PROG} memory: the learner measurement of {name} failed (exit {proc.exitcode})")
    with open(out_path, encoding="utf-8") as f:
        return LearnerMeasure(**json.load(f))


def per_workflow(trajs, learner: LearnerMeasure) -> WorkflowCost:
    from areal_mem.rollout.workflows.base import turn_lengths

    lengths = [turn_lengths(t.info) for t in trajs]
    row_tokens = [sum(len(c.input_ids) for c in t.contexts) for t in trajs]
    secs = learner.seconds
    return WorkflowCost(
        peak_context=max(max(x) for x in lengths),
        row_tokens_per_traj=sum(row_tokens) / len(row_tokens),
        prefill_tokens_per_traj=sum(sum(x) for x in lengths) / len(lengths),
        rows_per_traj=sum(len(t.contexts) for t in trajs) / len(trajs),
        learner_s_per_traj=sum(secs) / len(secs),
        learner_peak_mb=learner.peak_mb,
    )


def render(result: dict) -> str:
    w = result["workflows"]
    keys = [
        ("peak context (tokens)", "peak_context"),
        ("context rows per trajectory", "rows_per_traj"),
        ("tokens in the rows per trajectory (learner)", "row_tokens_per_traj"),
        ("context tokens summed over turns (generator prefill)", "prefill_tokens_per_traj"),
        ("learner seconds per trajectory", "learner_s_per_traj"),
        ("learner peak memory above warm process (MB)", "learner_peak_mb"),
    ]
    summary = markdown_table(
        ["per trajectory", "MemSearcher", "ReAct", "ReAct / MemSearcher"],
        [
            [
                label,
                w["memsearcher"][k],
                w["react"][k],
                f"{w['react'][k] / w['memsearcher'][k]:.2f}" if w["memsearcher"][k] else "-",
            ]
            for label, k in keys
        ],
    )
    turns = markdown_table(
        ["turn", "MemSearcher", "ReAct", "ReAct / MemSearcher"],
        [[r["turn"], r["memsearcher"], r["react"], f"{r['react/memsearcher']:.2f}"] for r in result["turn_table"]],
    )
    return f"{turns}\n\n{summary}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .arms import DEFAULT_CONFIG

    parser.add_argument("--config", default=DEFAULT_CONFIG, help="the recipe (its world, model, index)")
    parser.add_argument("--run-dir", default="runs/bench", help="where tables and plots go")
    parser.add_argument("--start-from", default="", metavar="DIR", help="a prepared run dir to reuse")
    parser.add_argument("--sft", action="store_true", help="warm-start the start model by SFT (slow)")
    parser.add_argument("--questions", type=int, default=8, help="dev questions per workflow")
    parser.add_argument("--turns", type=int, default=8, help="searches before the policy answers")
    parser.add_argument("--figures-dir", default="", help="also copy the plot here (docs/figures)")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config override")


def measure(args, start) -> dict:
    from areal_mem.config import load_run
    from areal_mem.retriever.launch import start_retriever

    cfg = load_run([args.config], [*args.overrides, *start.overrides()])
    work = os.path.join(args.run_dir, "memory")
    os.makedirs(work, exist_ok=True)
    with start_retriever(start.index) as handle:
        trajs = asyncio.run(
            run_workflows(start.world, start.model, handle.url, args.questions, args.turns, cfg.rollout)
        )
    from areal_mem.rollout.workflows.base import turn_lengths

    rows = turn_table({name: [turn_lengths(t.info) for t in ts] for name, ts in trajs.items()})
    workflows = {
        name: asdict(per_workflow(ts, measure_learner(start.model, ts, work, name, cfg.learner.micro_batch_tokens)))
        for name, ts in trajs.items()
    }
    return {
        "questions": args.questions,
        "turns": args.turns,
        "micro_batch_tokens": cfg.learner.micro_batch_tokens,
        "prompt_style": cfg.rollout.prompt_style.value,
        "turn_table": rows,
        "workflows": workflows,
        "command": command_line(),
    }


def run(args: argparse.Namespace) -> int:
    from .arms import start_of

    result = measure(args, start_of(args))
    result["plots"] = plot_turns(result["turn_table"], args.run_dir, args.figures_dir)
    write_json(args.run_dir, "memory", result)
    print("\n" + render(result), flush=True)
    return 0
