"""Tokens per context by turn: MemSearcher against ReAct, with a scripted policy that always searches.

    .venv/bin/python benchmarks/bench_context_length.py [--questions 20] [--turns 10] [--out DIR]

Both workflows run side by side in one process on the same questions, against the
real retrieval service (BM25 over a freshly built synthetic world) and with the
tiny model's tokenizer. The policy searches a corpus title every turn for
`--turns` turns, keeps the last two facts found as its memory, then answers.
Prints a table of context tokens per turn (mean over questions; a turn's length is
the context when its last generation ends: for MemSearcher prompt + action + tool
response + memory, for ReAct the whole history up to this turn's action) and writes
`context_length.png` and `context_length.json` into `--out` (default runs/benchmarks).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import tempfile
from collections import defaultdict
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rollout.generator.types import GenerationResult, SamplingParams  # noqa: E402
from rollout.oracle import read_context, search_call, split_documents  # noqa: E402

FACTS_KEPT = 2
FLAT_MAX = 1.2  # MemSearcher's context may vary this much over the search turns and still count as flat


class AlwaysSearchPolicy:
    """Searches a random title `turns` times per trajectory (counted per sticky key), then answers."""

    def __init__(self, tokenizer, titles: List[str], turns: int, seed: int = 0):
        self.tok, self.titles, self.turns = tokenizer, titles, turns
        self.rng = random.Random(seed)
        self.actions: Dict[str, int] = defaultdict(int)
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def _text(self, context: str, key: str) -> str:
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

    async def generate(self, input_ids: List[int], sampling: SamplingParams, rid: Optional[str] = None,
                       sticky_key: Optional[str] = None) -> GenerationResult:
        text = self._text(self.tok.decode(input_ids, skip_special_tokens=False), sticky_key or "")
        ids = self.tok.encode(text, add_special_tokens=False) + [self.im_end]
        return GenerationResult(ids, [0.0] * len(ids), [0] * len(ids), "stop", prompt_tokens=len(input_ids))


def _build(work: str):
    from areal_mem.config.model import TinyModelConfig
    from areal_mem.tiny_model import init_model
    from areal_mem.world import build_world
    from retriever.build import build_index

    world, model, index = (os.path.join(work, d) for d in ("world", "model", "index"))
    build_world(world, seed=0, passages=2000, questions=200)
    init_model(world, model, TinyModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1), seed=0)
    build_index(os.path.join(world, "corpus.jsonl"), index, kind="bm25", show_progress=False)
    return world, model, index


async def _measure(args, world: str, model: str, url: str) -> Dict[str, List[List[int]]]:
    from transformers import AutoTokenizer

    from areal_mem.data import read_tasks
    from retriever.client import RetrieverClient
    from rollout.oracle import corpus_titles
    from rollout.rewards.answer_reward import AnswerReward
    from rollout.tools.wikipedia_search import WikipediaSearchTool
    from rollout.workflows.base import Limits, WorkflowContext, turn_lengths
    from rollout.workflows.memsearcher import MemSearcherWorkflow
    from rollout.workflows.react import ReActWorkflow

    tok = AutoTokenizer.from_pretrained(model)
    tasks = read_tasks(os.path.join(world, "dev.jsonl"))[: args.questions]
    titles = sorted(set(corpus_titles(os.path.join(world, "corpus.jsonl")).values()))
    out: Dict[str, List[List[int]]] = {}
    async with RetrieverClient(url) as retriever:
        tool = WikipediaSearchTool(retriever)
        for workflow in (MemSearcherWorkflow(), ReActWorkflow()):
            ctx = WorkflowContext(
                generator=AlwaysSearchPolicy(tok, titles, args.turns), tokenizer=tok, tools={tool.name: tool},
                reward=AnswerReward(), sampling=SamplingParams(temperature=0.0),
                limits=Limits(max_turns=args.turns + 1, max_context_tokens=1 << 20))
            trajs = await asyncio.gather(*(workflow.run(t, ctx, f"{workflow.name}-{i}")
                                           for i, t in enumerate(tasks)))
            out[workflow.name] = [turn_lengths(t.info) for t in trajs]
    return out


def _table(lengths: Dict[str, List[List[int]]]) -> List[dict]:
    rows = []
    turns = max(len(x) for runs in lengths.values() for x in runs)
    for t in range(turns):
        row = {"turn": t + 1}
        for name, runs in lengths.items():
            vals = [x[t] for x in runs if len(x) > t]
            row[name] = sum(vals) / len(vals)
        row["react/memsearcher"] = row["react"] / row["memsearcher"]
        rows.append(row)
    return rows


def _plot(rows: List[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    turns = [r["turn"] for r in rows]
    ax.plot(turns, [r["memsearcher"] for r in rows], marker="o", label="MemSearcher (fresh context + memory)")
    ax.plot(turns, [r["react"] for r in rows], marker="s", label="ReAct (growing context)")
    ax.set_xlabel("turn")
    ax.set_ylabel("tokens in context (mean)")
    ax.set_title("Context length per turn, scripted always-search policy")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20, help="dev questions per workflow")
    parser.add_argument("--turns", type=int, default=10, help="searches before the policy answers")
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "benchmarks"), help="output folder")
    args = parser.parse_args()

    from retriever.launch import start_retriever

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-context-") as work:
        world, model, index = _build(work)
        with start_retriever(index) as handle:
            lengths = asyncio.run(_measure(args, world, model, handle.url))
    rows = _table(lengths)
    print(f"\ncontext tokens per turn, mean over {args.questions} questions "
          f"({args.turns} searches, then answer)")
    print("| turn | MemSearcher | ReAct | ReAct / MemSearcher |\n|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['turn']} | {r['memsearcher']:.0f} | {r['react']:.0f} | {r['react/memsearcher']:.2f} |")
    search_turns = rows[: args.turns]
    mem = [r["memsearcher"] for r in search_turns]
    react = [r["react"] for r in search_turns]
    flat, growth = max(mem) / min(mem), react[-1] / react[0]
    print(f"\nover the {args.turns} search turns: MemSearcher max/min {flat:.2f} (flat), "
          f"ReAct turn {args.turns} / turn 1 {growth:.2f} (grows)")
    _plot(rows, os.path.join(args.out, "context_length.png"))
    with open(os.path.join(args.out, "context_length.json"), "w", encoding="utf-8") as f:
        json.dump({"questions": args.questions, "turns": args.turns, "rows": rows}, f, indent=2)
    print(f"plot: {os.path.join(args.out, 'context_length.png')}")
    if flat > FLAT_MAX or (args.turns > 1 and growth < 1.5):
        print(f"FAILED: expected MemSearcher max/min <= {FLAT_MAX} and ReAct growth >= 1.5")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
