"""Evaluate the configured method end to end: load questions, reach or start servers, run, summarise."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Dict, List, Tuple

from areal_mem.config import RunConfig
from areal_mem.data import read_tasks
from areal_mem.data.task import Task

from .runner import evaluate
from .services import eval_services
from .summary import summarize


def eval_method(cfg: RunConfig) -> str:
    """The workflow to evaluate: `eval.method`, else the one training runs (`rollout.workflow`),
    so that evaluating a plugin's config evaluates the plugin's workflow."""
    return cfg.eval.method or cfg.rollout.workflow


def eval_tasks(cfg: RunConfig) -> Tuple[str, List[Task]]:
    path = cfg.eval.data or os.path.join(cfg.world.dir, "test.jsonl")
    tasks = read_tasks(path)
    return path, tasks[: cfg.eval.limit] if cfg.eval.limit else tasks


def run_eval(cfg: RunConfig, progress: bool = True) -> Tuple[Dict[str, Any], str]:
    """Writes `results.jsonl` and `summary.json` into the output folder; returns (summary, folder)."""
    from transformers import AutoTokenizer

    from areal_mem.rollout.workflows import build_workflow

    data_path, tasks = eval_tasks(cfg)
    method = eval_method(cfg)
    workflow = build_workflow(method)  # fail on a bad name before starting servers
    safe = method.replace(":", "_").replace("/", "_")
    out_dir = cfg.eval.out_dir or os.path.join(cfg.run_dir, "eval", safe)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
    with eval_services(cfg) as (gen_urls, ret_urls):
        records = asyncio.run(_run(cfg, workflow, tokenizer, tasks, gen_urls, ret_urls, out_dir, progress))
    summary = summarize(records, method=method, data=data_path)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    return summary, out_dir


async def _run(cfg: RunConfig, workflow, tokenizer, tasks, gen_urls, ret_urls, out_dir, progress):
    from areal_mem.retriever.client import RetrieverClient
    from areal_mem.rollout.generator.client import client_from_config
    from areal_mem.rollout.tools.backend import opened, search_backend
    from areal_mem.rollout.workflows import build_context

    async with (
        client_from_config(cfg.generator, gen_urls, tokenizer=tokenizer, generation_only=True) as generator,
        opened(
            search_backend(
                cfg.rollout,
                RetrieverClient.from_config(cfg.retriever, urls=ret_urls) if ret_urls else None,
                cfg.run_dir,
                "eval",
            )
        ) as retriever,
    ):
        ctx = build_context(
            cfg.rollout,
            workflow,
            generator,
            tokenizer,
            retriever,
            max_turns=cfg.eval.max_turns,
            temperature=cfg.eval.temperature,
        )
        return await evaluate(
            tasks,
            workflow,
            ctx,
            cfg.eval.concurrency,
            os.path.join(out_dir, "results.jsonl"),
            progress,
            cfg.eval.save_responses,
        )
