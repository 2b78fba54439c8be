"""The `areal-mem` command line.

Every command is one line in `COMMANDS`: its name and the module that holds it.
A command module defines `HELP` (one line), `add_arguments(parser)` and
`run(args) -> int`; heavy imports stay inside `run` so `--help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from typing import List, Optional

from areal_mem.config import ConfigError
from areal_mem.extras import MissingExtra

COMMANDS = {
    "config": "areal_mem.app.commands.config",
    "world": "areal_mem.app.world.command",
    "init-model": "areal_mem.app.tiny_model",
    "model": "areal_mem.app.model_import",
    "retriever": "areal_mem.retriever.command",
    "buffer": "areal_mem.buffer.server.command",
    "generator": "areal_mem.rollout.generator.command",
    "data": "areal_mem.app.commands.data",
    "eval": "areal_mem.app.evaluation.command",
    "evaluator": "areal_mem.app.evaluation.during_training",
    "learner": "areal_mem.app.commands.learner",
    "rollout": "areal_mem.app.commands.rollout",
    "train": "areal_mem.app.train",
    "sft": "areal_mem.learner.sft_command",
}
# commands that left the installed package, and where they went (told, exit 2)
MOVED = {"bench": "the system benchmarks moved out of the installed package: from a checkout run `python -m benchmarks"}


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` the parser of that one command (imports just its module)."""
    parser = argparse.ArgumentParser(
        prog="areal-mem",
        description="Asynchronous RL for search agents with a compact memory (MemSearcher on AReaL).",
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    for name, module_path in COMMANDS.items():
        if only and name != only:
            continue
        module = importlib.import_module(module_path)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def pin_cpus() -> None:
    """Pin this process to the CPUs the launcher gave it (`launcher.cpu_affinity`), if any."""
    from .launch.plan import AFFINITY_ENV

    value = os.environ.get(AFFINITY_ENV, "")
    if not value:
        return
    try:
        wanted = {int(c) for c in value.split(",")}
    except ValueError:
        raise ConfigError(f"launcher.cpu_affinity: {AFFINITY_ENV}={value!r} is not a list of CPU numbers") from None
    have = os.sched_getaffinity(0)
    if not wanted <= have:
        raise ConfigError(
            f"launcher.cpu_affinity: CPU(s) {sorted(wanted - have)} do not exist or are "
            f"not usable here ({AFFINITY_ENV}={value}); usable CPUs: {sorted(have)}"
        )
    os.sched_setaffinity(0, wanted)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in MOVED:
        print(f"areal-mem {argv[0]}: {MOVED[argv[0]]} {shlex.join(argv[1:]) or '<name> ...'}`", file=sys.stderr)
        return 2
    only = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(only).parse_args(argv)
    try:
        pin_cpus()
        return int(args._run(args) or 0)
    except ConfigError as e:
        print(f"areal-mem {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except MissingExtra as e:  # raised at a command's start (areal_mem.extras.require)
        print(f"areal-mem {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"areal-mem {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
