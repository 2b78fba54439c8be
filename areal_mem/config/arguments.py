"""The `--config FILE ... key=value ...` arguments that every config-driven command takes."""

from __future__ import annotations

import argparse
from typing import Iterable

from .loading import load_run
from .run import RunConfig


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        "-c",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML config; repeat to layer several (later files win)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override one config key")


def config_from_args(args: argparse.Namespace, optional: Iterable[str] = ()) -> RunConfig:
    """The typed run config of a command; `optional`: required keys this command does not use."""
    return load_run(args.config, args.overrides, optional=optional)
