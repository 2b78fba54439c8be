"""The recipe the paper and cost benches train and measure: the layered recipe files (`--config`)
and the overrides of a horizon (`--hops`), in one place so that both benches run the same
recipe at the same horizon."""

from __future__ import annotations

import argparse
import os
from typing import List

from .arms import DEFAULT_CONFIG

PAPER_CONFIG = os.path.join(os.path.dirname(DEFAULT_CONFIG), "paper_cpu.yaml")


def horizon_overrides(hops: int) -> List[str]:
    """The recipe at a horizon of `hops` hops (`--hops`, and `python -m benchmarks cost`): every
    bridge question has that many hops (`world.hops`), and the limits leave the oracle's plan
    room: a search a hop, the answer and one turn spare (the recipe's 4 turns at 2 hops), and
    48 tokens a hop for a generation and for the memory, which keeps a fact a hop (at least the
    recipe's 96 and 128: at 2 hops these are the recipe's own values). At 6 hops the oracle's
    memory rewrite is about 140 tokens, above the recipe's 96."""
    turns = hops + 2
    return [
        f"world.hops={hops}",
        f"rollout.limits.max_turns={turns}",
        f"eval.max_turns={turns}",
        f"rollout.limits.max_new_tokens={max(96, 48 * hops)}",
        f"rollout.limits.max_memory_tokens={max(128, 48 * hops)}",
    ]


def add_recipe_option(parser: argparse.ArgumentParser) -> None:
    """`--config`, the layered recipe files (`recipe_files`), for this bench and `cost`."""
    parser.add_argument(
        "--config",
        action="append",
        default=None,
        help="recipe file, repeat to layer (default configs/debug_cpu.yaml + configs/paper_cpu.yaml)",
    )


def recipe_files(args: argparse.Namespace) -> List[str]:
    return args.config or [DEFAULT_CONFIG, PAPER_CONFIG]
