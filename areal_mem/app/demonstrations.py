"""Oracle demonstrations for the SFT warm start: the scripted policy run through the real workflow.

Composition: the rollout's oracle and workflow, a retriever client and (when no
`retriever.urls` is set) a retriever service started over the world's corpus.
"""

from __future__ import annotations

import asyncio
import os
from typing import Dict, List

from transformers import AutoTokenizer

from areal_mem.app.evaluation.services import retriever_service
from areal_mem.config import ConfigError, RunConfig
from areal_mem.data import read_tasks
from areal_mem.retriever.client import RetrieverClient
from areal_mem.rollout.oracle import corpus_titles, demonstrations, oracle_for
from areal_mem.rollout.workflows import build_context, build_workflow


def oracle_class(cfg: RunConfig) -> type:
    """The scripted oracle of `rollout.workflow` (by the built workflow's name, so a
    `module:attribute` path to a built-in works too); a ConfigError naming the key when it has none."""
    try:
        return oracle_for(build_workflow(cfg.rollout.workflow).name)
    except ValueError as e:
        raise ConfigError(f"rollout.workflow={cfg.rollout.workflow!r}: {e}") from None


def write_demonstrations(
    cfg: RunConfig,
    out_path: str,
    split: str = "train",
    limit: int = 0,
    mistake_rate: float = 0.1,
    seed: int = 0,
    concurrency: int = 16,
    progress: bool = True,
    question_type: str = "",
) -> Dict[str, float]:
    """Oracle demonstrations for the world's `split` (only its `question_type` questions, the
    world's `type`, when given: a cost measured per bridge question needs no other), the first
    `limit` of them (0: all), written by the oracle of `rollout.workflow` through that workflow
    with the rollout config's settings."""
    oracle = oracle_class(cfg)  # before any work: a workflow without one is refused
    tasks = read_tasks(os.path.join(cfg.world.dir, f"{split}.jsonl"))
    if question_type:
        tasks = [t for t in tasks if t.metadata.get("type") == question_type]
        if not tasks:
            raise ValueError(f"the world's {split} split in {cfg.world.dir} has no {question_type!r} question")
    tasks = tasks[:limit] if limit else tasks
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
    policy = oracle(
        tokenizer,
        tasks,
        corpus_titles(os.path.join(cfg.world.dir, "corpus.jsonl")),
        mistake_rate=mistake_rate,
        seed=seed,
    )
    workflow = build_workflow(cfg.rollout.workflow)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)

    async def main(urls: List[str]) -> Dict[str, float]:
        async with RetrieverClient.from_config(cfg.retriever, urls=urls) as retriever:
            ctx = build_context(cfg.rollout, workflow, policy, tokenizer, retriever)
            return await demonstrations(tasks, policy, ctx, workflow, out_path, concurrency, progress)

    with retriever_service(cfg) as urls:
        return asyncio.run(main(urls))
