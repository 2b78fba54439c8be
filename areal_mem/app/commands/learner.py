"""`areal-mem learner`: the RL learner on 1..N ranks (run it under `deepspeed` or `torchrun`)."""

from __future__ import annotations

import argparse

from areal_mem.config.arguments import add_config_arguments, config_from_args

HELP = "train the policy with multi-context GRPO / decoupled PPO from the replay buffer (DeepSpeed)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--steps", type=int, default=None, help="override learner.steps")
    parser.add_argument(
        "--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS
    )  # passed by the deepspeed launcher; LOCAL_RANK wins


def run(args: argparse.Namespace) -> int:
    from areal_mem.config import ConfigError, save_resolved
    from areal_mem.config.learner import PublisherKind
    from areal_mem.model_files import check_model_path

    cfg = config_from_args(args)
    if not cfg.buffer.url:
        raise ConfigError(
            "buffer.url is empty: the learner needs a running buffer "
            "(start one with `areal-mem buffer serve` or the launcher)"
        )
    if cfg.learner.publish.kind != PublisherKind.none and not cfg.generator.urls:
        raise ConfigError(
            "generator.urls is empty: set the generators to push weights to, or learner.publish.kind=none"
        )
    check_model_path(cfg.model.path)  # by key, not as the loader's traceback

    from areal_mem.buffer.client import BufferClient
    from areal_mem.learner.engine import LearnerEngine
    from areal_mem.learner.publishers import make_publisher
    from areal_mem.learner.trainer import Trainer
    from areal_mem.rollout.generator.client import client_from_config

    engine = LearnerEngine(cfg.model.path, cfg.learner, seed=cfg.seed)
    leader = engine.rank == 0
    if leader:
        save_resolved(cfg)
    buffer = BufferClient.from_config(cfg.buffer) if leader else None
    client = None
    if leader and cfg.learner.publish.kind != PublisherKind.none:
        client = client_from_config(cfg.generator)
    publisher = make_publisher(cfg.learner.publish, engine, client, cfg.run_dir)
    trainer = Trainer(cfg, engine, publisher, buffer, cfg.buffer.batch_groups)
    try:
        state = trainer.run(args.steps)
    finally:
        if publisher is not None:
            publisher.close()
        if buffer is not None:
            buffer.close()
    if leader:
        print(f"[learner] done: step {state.step}, version {state.version}", flush=True)
    return 0
