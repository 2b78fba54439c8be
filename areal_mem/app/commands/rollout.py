"""`areal-mem rollout`: one rollout worker process against running services.

The launcher passes the services' addresses as overrides
(`generator.urls=[...] retriever.urls=[...] buffer.url=...`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys

from areal_mem.config import RunConfig
from areal_mem.config.arguments import add_config_arguments, config_from_args

HELP = "run one rollout worker (episodes -> groups -> replay buffer)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--worker-id", type=int, default=0)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--max-groups", type=int, default=0, help="stop after this many (0: run on)")


def train_data_path(cfg: RunConfig) -> str:
    return cfg.rollout.data or os.path.join(cfg.world.dir, "train.jsonl")


async def _main(cfg: RunConfig, args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from areal_mem.buffer.client import BufferClient
    from areal_mem.data import read_tasks
    from areal_mem.retriever.client import RetrieverClient
    from areal_mem.rollout.generator.client import client_from_config
    from areal_mem.rollout.tasks import TaskCursor
    from areal_mem.rollout.tools.backend import search_backend
    from areal_mem.rollout.worker import RolloutWorker
    from areal_mem.rollout.workflows.setup import build_context, build_workflow

    for key, value in (("generator.urls", cfg.generator.urls), ("buffer.url", cfg.buffer.url)):
        if not value:
            raise SystemExit(
                f"areal-mem rollout: {key} is empty; start the services first "
                f"(areal-mem train does) and pass their addresses"
            )
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path)
    workflow = build_workflow(cfg.rollout.workflow)
    cursor = TaskCursor(
        read_tasks(train_data_path(cfg)),
        args.worker_id,
        args.num_workers,
        cfg.seed,
        os.path.join(cfg.run_dir, "rollout", f"worker{args.worker_id}.json"),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    buffer = BufferClient.from_config(cfg.buffer)
    async with client_from_config(cfg.generator) as generator:
        live = RetrieverClient.from_config(cfg.retriever) if cfg.retriever.urls else None
        retriever = search_backend(cfg.rollout, live, cfg.run_dir, f"worker{args.worker_id}")  # record/replay
        try:
            ctx = build_context(cfg.rollout, workflow, generator, tokenizer, retriever, seed=cfg.seed)
            worker = RolloutWorker(
                workflow,
                ctx,
                buffer,
                cursor,
                cfg.rollout.group_size,
                cfg.rollout.max_concurrent_groups,
                slots_path=os.path.join(cfg.run_dir, "rollout", f"worker{args.worker_id}.slots.json"),
                max_staleness=cfg.buffer.max_staleness if cfg.rollout.cancel_stale_groups else None,
                oldest_first=cfg.rollout.oldest_first,
            )
            stats = await worker.run(args.max_groups or None, stop)
        finally:
            if retriever is not None:
                await retriever.close()
            buffer.close()
    print(json.dumps({"worker": args.worker_id, **stats.as_dict()}), flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="%(asctime)s rollout%(worker)s %(levelname)s %(message)s".replace("%(worker)s", str(args.worker_id)),
    )
    cfg = config_from_args(args, model=True)
    return asyncio.run(_main(cfg, args))
