"""`areal-mem evaluator`: evaluate policy versions while asynchronous RL trains (`eval.interval`).

The launcher starts it beside the learner. It takes each version the learner hands over
(`areal_mem.policy_snapshots`), runs `eval.method` (empty: `rollout.workflow`) greedily over the
same `eval.dev_questions` of the dev split, and logs EM/F1 by version and wall time: TensorBoard
`eval_dev/*` (step = version, wall time = when the learner handed the version over),
`metrics.jsonl` lines of kind `eval_dev`, and `<run_dir>/eval_during/curve.jsonl` (one line per
version, read by the train summary). With `eval.train_questions` a sample of training questions
is evaluated too (`eval_train/*`), so a policy that learns the training entities instead of
searching shows as two curves parting. Two placements (`eval.placement`):

- `own`: a generator of its own, loaded with each version's weights before its evaluation and
  holding them throughout, so every token is sampled by exactly that version;
- `shared`: the training generators, with every request at `eval.priority` (lower than the
  rollouts'), so no device is set aside; the weights move on while it runs, so each version's
  line says which share of its tokens that version sampled (`pinned_fraction`).

When versions arrive faster than they are evaluated, the newest waiting one is taken and the
older ones are skipped (logged, with a hint to raise `eval.interval`): the curve stays current
instead of falling further behind. The first version (where RL starts) and the last are never
skipped, so every curve has its baseline and its end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, Dict, List, Optional, Set

from areal_mem import policy_snapshots as snapshots
from areal_mem.config import ConfigError, RunConfig
from areal_mem.config.arguments import add_config_arguments, config_from_args
from areal_mem.config.eval import EvalPlacement
from areal_mem.config.generator import GeneratorBackend
from areal_mem.data import read_tasks
from areal_mem.data.task import Task

from .evaluate import eval_method
from .runner import evaluate
from .summary import summarize

HELP = "evaluate policy versions on a dev sample while RL trains (started by the launcher when eval.interval > 0)"
log = logging.getLogger("areal_mem.app.evaluation.during_training")
CURVE_KEYS = (
    "em",
    "f1",
    "acc",
    "reward",
    "mean_turns",
    "mean_tool_calls",
    "search_rate",
    "golden_in_search_rate",
    "answer_copied_rate",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--poll-s", type=float, default=1.0, help="how often to look for a new version (seconds)")


def samples(cfg: RunConfig) -> Dict[str, List[Task]]:
    """The fixed question samples every version is evaluated on, by metrics prefix: the dev
    split's first `eval.dev_questions`, and with `eval.train_questions` the training data's."""
    ev = cfg.eval
    wanted = {
        "eval_dev": ("eval.dev_data", ev.dev_data or os.path.join(cfg.world.dir, "dev.jsonl"), ev.dev_questions),
        "eval_train": (
            "rollout.data",
            cfg.rollout.data or os.path.join(cfg.world.dir, "train.jsonl"),
            ev.train_questions,
        ),
    }
    out = {}
    for prefix, (key, path, n) in wanted.items():
        if n <= 0:
            continue
        out[prefix] = read_tasks(path)[:n]
        if not out[prefix]:
            raise ConfigError(f"{key}: {path} holds no questions")
    if "eval_dev" not in out:
        raise ConfigError("eval.dev_questions must be at least 1 for the evaluation beside training")
    return out


def pinned_fraction(records: List[Dict[str, Any]], version: int) -> float:
    """The share of the evaluation's model tokens that `version` sampled (1.0 under `own`)."""
    counts: Counter = Counter()
    for r in records:
        counts.update({int(v): n for v, n in r["token_versions"].items()})
    total = sum(counts.values())
    return counts[version] / total if total else 1.0


class Evaluator:
    def __init__(self, cfg: RunConfig, poll_s: float = 1.0) -> None:
        from transformers import AutoTokenizer

        from areal_mem.learner.metrics import MetricsLogger
        from areal_mem.rollout.workflows import build_workflow

        if cfg.eval.interval <= 0:
            raise ConfigError("eval.interval must be > 0 for the evaluator beside training")
        self.cfg, self.poll_s = cfg, poll_s
        self.own = cfg.eval.placement == EvalPlacement.own
        self.samples = samples(cfg)
        self.workflow = build_workflow(eval_method(cfg))
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
        self.done: Set[int] = {int(row["version"]) for row in snapshots.read_curve(cfg.run_dir)}
        self.metrics = MetricsLogger(cfg.run_dir)
        self.results_dir = os.path.join(snapshots.root(cfg.run_dir), "results")

    # ---- the generator it evaluates with ----
    def _generator_urls(self, stack: ExitStack) -> List[str]:
        """`own`: start one generator from the RL start model (later versions load into it);
        `shared`: the training generators."""
        cfg = self.cfg
        if not self.own:
            if not cfg.generator.urls:
                raise ConfigError("eval.placement=shared needs the training generators (generator.urls)")
            return list(cfg.generator.urls)
        from areal_mem.rollout.generator.launch import start_embedded_generator, start_generators

        if cfg.generator.backend == GeneratorBackend.sglang:
            handles = start_generators(replace(cfg.generator, num_servers=1, port=0, urls=[]), cfg.model.path)
        else:
            embedded = replace(cfg.generator.embedded, weights_dirs=[snapshots.root(cfg.run_dir)])
            log_path = os.path.join(cfg.run_dir, "logs", "evaluator-generator.log")
            handles = [
                start_embedded_generator(
                    cfg.model.path,
                    embedded,
                    cfg.generator.host,
                    0,
                    cfg.generator.token,
                    cfg.generator.startup_timeout_s,
                    log_path=log_path,
                )
            ]
        for h in handles:
            stack.callback(h.stop)
        log.info("evaluator: own generator at %s", handles[0].url)
        return [h.url for h in handles]

    # ---- the loop ----
    def run(self) -> int:
        with ExitStack() as stack:
            urls = self._generator_urls(stack)
            try:
                return asyncio.run(self._loop(urls))
            finally:
                self.metrics.close()

    async def _loop(self, gen_urls: List[str]) -> int:
        from areal_mem.retriever.client import RetrieverClient
        from areal_mem.rollout.generator.client import client_from_config
        from areal_mem.rollout.tools.backend import opened, search_backend
        from areal_mem.rollout.workflows import build_context

        cfg = self.cfg
        priority = None if self.own else cfg.eval.priority
        async with (
            client_from_config(cfg.generator, gen_urls, priority=priority) as generator,
            opened(
                search_backend(cfg.rollout, RetrieverClient.from_config(cfg.retriever), cfg.run_dir, "evaluator")
            ) as retriever,
        ):
            ctx = build_context(
                cfg.rollout,
                self.workflow,
                generator,
                self.tokenizer,
                retriever,
                max_turns=cfg.eval.max_turns,
                temperature=cfg.eval.temperature,
            )
            while True:
                finished = snapshots.learner_done(cfg.run_dir)  # before listing: no version is missed
                waiting = [(v, p) for v, p in snapshots.pending(cfg.run_dir) if v not in self.done]
                if not waiting:
                    if finished:
                        log.info("evaluator: the learner is done and every version is evaluated")
                        return 0
                    await asyncio.sleep(self.poll_s)
                    continue
                if self.done:
                    *skipped, (version, folder) = waiting
                else:  # the first version is the curve's baseline (RL's start): never skipped
                    skipped, (version, folder) = [], waiting[0]
                if skipped:
                    log.warning(
                        "evaluator: skipping version(s) %s, evaluation is slower than training "
                        "(raise eval.interval for every point of the curve)",
                        [v for v, _ in skipped],
                    )
                    for _, path in skipped:
                        shutil.rmtree(path, ignore_errors=True)
                await self._evaluate(version, folder, generator, ctx)
                shutil.rmtree(folder, ignore_errors=True)

    async def _evaluate(self, version: int, folder: str, generator, ctx) -> Dict[str, Any]:
        cfg = self.cfg
        info = snapshots.read_info(folder)
        t0 = time.monotonic()
        if self.own:
            await generator.update_weights_from_disk(os.path.abspath(folder), version)
        summaries, records = {}, []
        for prefix, tasks in self.samples.items():
            name = f"v{version:06d}.jsonl" if prefix == "eval_dev" else f"train_v{version:06d}.jsonl"
            got = await evaluate(
                tasks, self.workflow, ctx, cfg.eval.concurrency, os.path.join(self.results_dir, name), progress=False
            )
            summaries[prefix] = summarize(got, method=eval_method(cfg), data=prefix)
            records += got
        if self.own:  # nothing else loads into this generator: a moved version is a bug, not noise
            served = await generator.weight_versions()
            if set(served.values()) != {version}:
                raise RuntimeError(f"evaluator: the generator serves {served} after evaluating version {version}")
        dev = summaries["eval_dev"]
        row = {
            "version": version,
            "step": info["step"],
            "time": info["time"],  # when the learner handed the version over
            "questions": dev["questions"],
            **{k: dev[k] for k in CURVE_KEYS},
            "pinned_fraction": round(pinned_fraction(records, version), 4),
            "eval_s": round(time.monotonic() - t0, 2),
            "lag_s": round(time.time() - info["time"], 2),  # hand-over to result
        }
        if "eval_train" in summaries:
            row.update({f"train_{k}": summaries["eval_train"][k] for k in CURVE_KEYS})
        os.makedirs(os.path.dirname(snapshots.curve_path(cfg.run_dir)), exist_ok=True)
        with open(snapshots.curve_path(cfg.run_dir), "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        for prefix, summary in summaries.items():
            scalars = {k: float(summary[k]) for k in CURVE_KEYS if summary[k] is not None}
            if prefix == "eval_dev":
                scalars.update({k: float(row[k]) for k in ("pinned_fraction", "eval_s", "lag_s")})
            self.metrics.log(version, scalars, prefix=prefix, walltime=info["time"])
        self.done.add(version)
        return row


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    def stop(signum, _frame):  # unwind through the ExitStack: the own generator stops too
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    cfg = config_from_args(args, model=True)
    return Evaluator(cfg, poll_s=args.poll_s).run()


def curve_table(rows: List[Dict[str, Any]]) -> str:
    """The curve as a plain table for the console and the train summary."""
    train = "train_em" in rows[0]
    lines = [
        "version  step   EM %   F1 %  searched %  copied %" + ("  train EM %" if train else "") + "  pinned  eval s"
    ]
    for r in rows:
        lines.append(
            f"{r['version']:>7}  {r['step']:>4}  {_cell(r['em'], 5)}  {_cell(r['f1'], 5)}  "
            f"{_cell(r['search_rate'], 10)}  {_cell(r['answer_copied_rate'], 8)}"
            + (f"  {_cell(r['train_em'], 10)}" if train else "")
            + f"  {r['pinned_fraction']:>6.2f}  {r['eval_s']:>6.1f}"
        )
    return "\n".join(lines)


def _cell(value: Optional[float], width: int) -> str:
    """A percentage of the table, `-` where the workflow has no such number (no EM for a plugin
    that is not question answering)."""
    return f"{value:>{width}.1f}" if value is not None else "-".rjust(width)


def _pyplot():
    """matplotlib.pyplot on the file backend. matplotlib is a core dependency, checked when the run
    starts (`require_extras`); None only where it still fails to import (a broken install)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, ax, path: str) -> str:
    """Grid, legend, tight layout; the figure written to `path` and closed."""
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_training(rows: List[Dict[str, Any]], path: str) -> Optional[str]:
    """The training batches' mean reward and EM against the learner step (metrics.jsonl rows of
    kind "train") as a PNG; None without rows or without matplotlib."""
    plt = _pyplot()
    if plt is None or not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["reward"] for r in rows], label="reward")
    if all("em" in r for r in rows):
        ax.plot(steps, [r["em"] for r in rows], linestyle="--", label="EM")
    ax.set_xlabel("learner step")
    ax.set_ylabel("training batch mean")
    ax.set_title("rollouts the learner trained on")
    return _save(plt, fig, ax, path)


def plot_curve(rows: List[Dict[str, Any]], path: str) -> Optional[str]:
    """EM and F1 against version as a PNG; None without matplotlib (`_pyplot`)."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    versions = [r["version"] for r in rows]
    ax.plot(versions, [r["em"] for r in rows], marker="o", label="EM")
    ax.plot(versions, [r["f1"] for r in rows], marker="s", label="F1")
    if "train_em" in rows[0]:
        ax.plot(versions, [r["train_em"] for r in rows], marker="^", linestyle="--", label="EM, train questions")
    ax.set_xlabel("policy version")
    ax.set_ylabel("dev %")
    ax.set_title(f"greedy evaluation beside training ({rows[0]['questions']} dev questions)")
    return _save(plt, fig, ax, path)
