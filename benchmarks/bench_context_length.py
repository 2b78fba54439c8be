"""Tokens per context by turn: MemSearcher against ReAct, with a scripted policy that always searches.

    .venv/bin/python benchmarks/bench_context_length.py [--questions 20] [--turns 10] [--out DIR]

Both workflows run side by side in one process on the same questions (the policy and the
measurement live in `benchmarks/harness/memory.py`, shared with `python -m benchmarks memory`), against the
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
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.harness.memory import plot_turns, run_workflows, turn_table  # noqa: E402

FLAT_MAX = 1.2  # MemSearcher's context may vary this much over the search turns and still count as flat


def _build(work: str):
    from areal_mem.app.tiny_model import init_model
    from areal_mem.app.world import build_world
    from areal_mem.config.model import TinyModelConfig
    from areal_mem.retriever.build import build_index

    world, model, index = (os.path.join(work, d) for d in ("world", "model", "index"))
    build_world(world, seed=0, passages=2000, questions=200)
    init_model(
        world,
        model,
        TinyModelConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
        ),
        seed=0,
    )
    build_index(os.path.join(world, "corpus.jsonl"), index, kind="bm25", show_progress=False)
    return world, model, index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20, help="dev questions per workflow")
    parser.add_argument("--turns", type=int, default=10, help="searches before the policy answers")
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "benchmarks"), help="output folder")
    args = parser.parse_args()

    from areal_mem.retriever.launch import start_retriever
    from areal_mem.rollout.workflows.base import turn_lengths

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-context-") as work:
        world, model, index = _build(work)
        with start_retriever(index) as handle:
            trajs = asyncio.run(run_workflows(world, model, handle.url, args.questions, args.turns))
    rows = turn_table({name: [turn_lengths(t.info) for t in ts] for name, ts in trajs.items()})
    print(f"\ncontext tokens per turn, mean over {args.questions} questions ({args.turns} searches, then answer)")
    print("| turn | MemSearcher | ReAct | ReAct / MemSearcher |\n|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['turn']} | {r['memsearcher']:.0f} | {r['react']:.0f} | {r['react/memsearcher']:.2f} |")
    search_turns = rows[: args.turns]
    mem = [r["memsearcher"] for r in search_turns]
    react = [r["react"] for r in search_turns]
    flat, growth = max(mem) / min(mem), react[-1] / react[0]
    print(
        f"\nover the {args.turns} search turns: MemSearcher max/min {flat:.2f} (flat), "
        f"ReAct turn {args.turns} / turn 1 {growth:.2f} (grows)"
    )
    plot_turns(rows, args.out)
    with open(os.path.join(args.out, "context_length.json"), "w", encoding="utf-8") as f:
        json.dump({"questions": args.questions, "turns": args.turns, "rows": rows}, f, indent=2)
    print(f"plot: {os.path.join(args.out, 'context_length.png')}")
    if flat > FLAT_MAX or (args.turns > 1 and growth < 1.5):
        print(f"FAILED: expected MemSearcher max/min <= {FLAT_MAX} and ReAct growth >= 1.5")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
