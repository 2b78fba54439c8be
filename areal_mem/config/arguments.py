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


def config_from_args(args: argparse.Namespace, optional: Iterable[str] = (), model: bool = False) -> RunConfig:
    """The typed run config of a command; `optional`: required keys this command does not use;
    `model`: the command loads `model.path`, so it must be a model folder (refused by key here,
    before any service starts, not as a loader's traceback later)."""
    cfg = load_run(args.config, args.overrides, optional=optional)
    if model:
        from ..model_files import check_model_path

        check_model_path(cfg.model.path)
    return cfg


def add_serve_parser(subparsers, service: str, help: str, description: str) -> argparse.ArgumentParser:
    """`<service> serve`, with what every service's takes: --host, --port, --ready-file (how a launcher
    learns the address of port 0) and the config arguments; the caller adds its own options."""
    parser = subparsers.add_parser("serve", help=help, description=description)
    parser.add_argument("--host", help=f"bind address (default: {service}.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"port (default: {service}.port; 0 picks a free one)")
    parser.add_argument("--ready-file", metavar="FILE", help="write the service URL here once it serves")
    add_config_arguments(parser)
    return parser
