"""Shared-prefix training against the padded forward, on the same batches, medians of repeats.

For each model (the debug recipe's tiny shape, built here; SmolLM2-135M-Instruct with the released
prompt) and each workflow's context shape (MemSearcher: one context a turn, each starting with
the system prompt, the question and the memory; ReAct: one growing context a trajectory), rows
are built with the workflow's own prompt builders and tokenizer (`render_prompt`,
`tool_turn_text`, the memory instruction), the generated spans drawn at random token ids of the
lengths such turns have; no generator runs. One RL optimiser step (`LearnerEngine.train_step`,
lr 0 so both arms see the same weights) per arm and repeat, the arms interleaved:

- tokens computed per token trained: the tokens the backbone computes (padded rows x longest
  row; with sharing, the prefix tree's nodes plus each leaf batch padded to its longest), over
  the loss-mask tokens;
- step seconds, and the peak memory of one more step per arm (CPU: the resident set's largest
  rise over the step, sampled every millisecond, large blocks mmap'd so that freed memory leaves
  the resident set; CUDA: `max_memory_allocated`);
- `--sft-steps N`: N SFT steps of the debug recipe's length-sorted 3,000-token batches, timed per arm.

    nice -n 10 .venv/bin/python benchmarks/bench_shared_prefix.py --smollm2 /work/models/smollm2 --repeats 3
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from typing import Dict, List, Tuple

import torch


def _words(rng: random.Random, n: int) -> str:
    vocab = "the of film director born city river album band war king county station team song river".split()
    return " ".join(rng.choice(vocab) for _ in range(n))


class Shapes:
    """Random spans of a workflow's turns, as token ids of `tok` (no special tokens)."""

    def __init__(self, tok, seed: int):
        self.tok, self.rng = tok, random.Random(seed)
        specials = set(tok.all_special_ids)
        self.ids = [i for i in range(len(tok)) if i not in specials]

    def gen(self, lo: int, hi: int) -> List[int]:
        return [self.rng.choice(self.ids) for _ in range(self.rng.randint(lo, hi))]

    def encode(self, text: str) -> List[int]:
        from areal_mem.rollout.workflows.tokens import encode

        return encode(self.tok, text)

    def tool_text(self, docs: int, words: int) -> str:
        return "\n".join(f"<tool_response>Doc {d + 1}: {_words(self.rng, words)}</tool_response>" for d in range(docs))


def _row(prompt: List[int], spans, adv: float):
    """A context row: `spans` of (ids, trained) after the prompt."""
    from areal_mem.learner.batch import TrainRow

    ids, mask = list(prompt), []
    for part, trained in spans:
        ids += part
        mask += [int(trained)] * len(part)
    n = len(mask)
    return TrainRow(ids, len(prompt), mask, [-2.0 * m for m in mask], [0] * n, [adv * m for m in mask])


def memsearcher_rows(tok, template: str, groups: int, group_size: int, seed: int, doc_words: int):
    """A MemSearcher batch: per turn one context of system + question + memory, the action
    (trained), the tool responses and memory instruction (masked), the new memory (trained)."""
    from areal_mem.rollout.workflows.memsearcher import MEMORY_INSTRUCTION, tool_turn_text
    from areal_mem.rollout.workflows.tokens import render_prompt

    s, rows = Shapes(tok, seed), []
    for _ in range(groups):
        question = _words(s.rng, s.rng.randint(10, 25)).capitalize() + "?"
        for _ in range(group_size):
            adv, memory = s.rng.choice([-1.0, 0.5, 1.0]), ""
            turns = s.rng.randint(1, 3)
            for t in range(turns):
                prompt = s.encode(render_prompt(template, question=question, memory=memory))
                if t == turns - 1:  # answers
                    rows.append(_row(prompt, [(s.gen(40, 90), True)], adv))
                    continue
                tool = s.encode(tool_turn_text(s.tool_text(2, doc_words), MEMORY_INSTRUCTION))
                rows.append(_row(prompt, [(s.gen(40, 90), True), (tool, False), (s.gen(60, 120), True)], adv))
                memory = _words(s.rng, s.rng.randint(30, 70))
    return rows


def react_rows(tok, template: str, groups: int, group_size: int, seed: int, doc_words: int):
    """A ReAct batch: one context a trajectory, system + question, then actions (trained) and
    tool responses (masked) appended until the answer."""
    from areal_mem.rollout.workflows.memsearcher import tool_turn_text
    from areal_mem.rollout.workflows.tokens import assistant_prefix, render_prompt

    s, rows = Shapes(tok, seed), []
    for _ in range(groups):
        question = _words(s.rng, s.rng.randint(10, 25)).capitalize() + "?"
        text = render_prompt(template, question=question)
        for _ in range(group_size):
            spans = []
            for _ in range(s.rng.randint(0, 2)):
                spans += [
                    (s.gen(40, 90), True),
                    (s.encode(tool_turn_text(s.tool_text(2, doc_words)) + assistant_prefix(text)), False),
                ]
            rows.append(_row(s.encode(text), spans + [(s.gen(40, 90), True)], s.rng.choice([-1.0, 0.5, 1.0])))
    return rows


class PeakMemory:
    """The largest rise of the resident set (CPU) or of allocated memory (CUDA) while inside."""

    def __enter__(self):
        self.cuda = torch.cuda.is_available()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        self.base = self.peak = _rss()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.stop.wait(0.001):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc):
        if self.cuda:
            self.rise = torch.cuda.max_memory_allocated() - self.base
        else:
            self.stop.set()
            self.thread.join()
            self.rise = max(self.peak, _rss()) - self.base


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def computed_tokens(engine, rows) -> Tuple[int, int]:
    """(tokens the backbone computes for one step of `rows` under the engine's current config,
    of which not padding)."""
    from areal_mem.learner.shared_prefix import build_tree, tree_tokens

    total = real = 0
    for mb in engine._plan(rows, engine.cfg.mini_batches)[0]:
        if engine.cfg.shared_prefix:
            tree = build_tree(mb, engine.cfg.shared_prefix_min_tokens)
            total, real = total + tree_tokens(mb, tree), real + tree_tokens(mb, tree, padded=False)
        elif mb:
            total, real = total + len(mb) * max(len(r) for r in mb), real + sum(len(r) for r in mb)
    return total, real


def bench_rl(engine, rows, repeats: int) -> Dict[str, dict]:
    """Per arm: tokens computed per trained token, and per repeat the step's seconds and memory."""
    trained = sum(r.num_loss_tokens for r in rows)
    out = {}
    for shared in (False, True):
        engine.cfg.shared_prefix = shared
        computed, real = computed_tokens(engine, rows)
        out[shared] = {"computed": computed, "padding": 1 - real / computed, "s": [], "mem": []}
    engine.cfg.shared_prefix = True
    engine.train_step(rows, version=0)  # warm-up (allocator, kernels), on the cheaper arm
    for _ in range(repeats):
        for shared in (False, True):
            engine.cfg.shared_prefix = shared
            t0 = time.perf_counter()
            engine.train_step(rows, version=0)
            out[shared]["s"].append(time.perf_counter() - t0)
    # memory in steps of their own: the sampling thread takes the GIL every millisecond, which on
    # a loaded machine slows the arm with more Python between kernels (the tree's) by several x
    for shared in (False, True):
        engine.cfg.shared_prefix = shared
        with PeakMemory() as pm:
            engine.train_step(rows, version=0)
        out[shared]["mem"].append(pm.rise)
    for arm in out.values():
        arm["per_trained"] = arm["computed"] / trained
    return out


def bench_sft(engine, rows, steps: int, budget: int) -> Dict[bool, float]:
    """Seconds of `steps` SFT steps of length-sorted batches (the debug recipe's), per arm."""
    from areal_mem.learner.sft_batches import token_batches

    batches = token_batches([len(r) for r in rows], budget, seed=0, epoch=0)
    batches = (batches * (steps // max(1, len(batches)) + 1))[:steps]
    out = {}
    for shared in (False, True):
        engine.cfg.shared_prefix = shared
        t0 = time.perf_counter()
        for b in batches:
            engine.sft_step([rows[i] for i in b])
        out[shared] = time.perf_counter() - t0
    return out


def _engine(model: str, budget: int):
    from areal_mem.config.learner import LearnerConfig
    from areal_mem.learner.engine import LearnerEngine

    cfg = LearnerConfig(lr=0.0, weight_decay=0.0, zero_stage=2, micro_batch_tokens=budget)
    return LearnerEngine(model, dataclasses.replace(cfg))


def report(name: str, res: Dict[bool, dict]) -> None:
    u, s = res[False], res[True]
    us, ss = statistics.median(u["s"]), statistics.median(s["s"])
    um, sm = statistics.median(u["mem"]) / 2**20, statistics.median(s["mem"]) / 2**20
    print(f"\n{name}")
    print("| arm | tokens computed / token trained | padding share | step s (median) | peak memory MiB |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| padded rows | {u['per_trained']:.2f} | {u['padding']:.1%} | {us:.2f} | {um:.0f} |")
    print(f"| shared prefix | {s['per_trained']:.2f} | {s['padding']:.1%} | {ss:.2f} | {sm:.0f} |")
    ratio = s["per_trained"] / u["per_trained"]
    print(f"| shared / padded | {ratio:.2f} | | {ss / us:.2f} | {sm / max(um, 1e-9):.2f} |")
    print(f"repeats (s): padded {[round(x, 2) for x in u['s']]}, shared {[round(x, 2) for x in s['s']]}")


def main() -> None:
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        # large blocks from mmap go back to the system when freed, so the resident set follows
        # what the step holds (glibc reads this at start: run again with it set)
        os.execve(sys.executable, [sys.executable, *sys.argv], dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smollm2", default="", help="SmolLM2-135M-Instruct folder (skipped when empty)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tiny-groups", type=int, default=8, help="the debug recipe's batch_groups")
    ap.add_argument("--smollm2-groups", type=int, default=1)
    ap.add_argument("--group-size", type=int, default=5)
    ap.add_argument("--budget", type=int, default=4096, help="micro_batch_tokens")
    ap.add_argument("--sft-steps", type=int, default=20, help="SFT steps per arm on the tiny model (0: none)")
    ap.add_argument("--workflows", default="memsearcher,react")
    ap.add_argument("--no-tiny", action="store_true", help="only SmolLM2")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from areal_mem.rollout.workflows.tokens import packaged_prompt

    build = {"memsearcher": memsearcher_rows, "react": react_rows}
    with tempfile.TemporaryDirectory() as tmp:
        from bench_learner import build_model

        models = []
        if not args.no_tiny:
            tiny = build_model(tmp, 128, 2)
            models.append(("tiny (debug recipe: hidden 128, 2 layers)", tiny, "_short", args.tiny_groups, 40))
        if args.smollm2:
            models.append(("SmolLM2-135M-Instruct", args.smollm2, "", args.smollm2_groups, 110))
        for label, path, style, groups, doc_words in models:
            tok = AutoTokenizer.from_pretrained(path)
            engine = _engine(path, args.budget)
            for wf in args.workflows.split(","):
                rows = build[wf](tok, packaged_prompt(f"{wf}{style}.txt"), groups, args.group_size, 0, doc_words)
                lengths = [len(r) for r in rows]
                title = f"{label}, {wf}: {len(rows)} rows of {min(lengths)}-{max(lengths)} tokens (mean {statistics.mean(lengths):.0f}), {groups} group(s) of {args.group_size}"
                report(title, bench_rl(engine, rows, args.repeats))
                if wf == "memsearcher" and "tiny" in label and args.sft_steps:
                    # oracle demonstrations: one trajectory a question
                    demos = memsearcher_rows(tok, packaged_prompt(f"{wf}{style}.txt"), 60, 1, 1, doc_words)
                    sft = bench_sft(engine, demos, args.sft_steps, 3000)
                    print(
                        f"SFT, {args.sft_steps} steps of 3,000-token length-sorted batches: padded {sft[False]:.2f} s, shared {sft[True]:.2f} s, ratio {sft[True] / sft[False]:.2f}"
                    )
            del engine


if __name__ == "__main__":
    main()
