"""`areal-mem config`: print the resolved configuration (and optionally save it)."""

from __future__ import annotations

import argparse

from areal_mem.config import save_resolved, to_yaml
from areal_mem.config.arguments import add_config_arguments, config_from_args

HELP = "print the resolved config of a run (files + key=value overrides)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--save", action="store_true", help="also write <run_dir>/config.yaml")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    print(to_yaml(cfg), end="")
    if args.save:
        print(f"# written to {save_resolved(cfg)}")
    return 0
