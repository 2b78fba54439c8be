"""`python -m benchmarks <name>`: one system benchmark, or `all` of them and the report.

Each entry of `BENCHES` is a module with `HELP`, `add_arguments(parser)` and `run(args)`, and
optionally `NEEDS`: the modules outside the core install it cannot finish without (matplotlib
for the plots). Those are checked before the benchmark starts anything, so a missing one costs
a second, not an hour of arms. Every module is imported when the parser is built, so a missing
one (e.g. a bench written separately) leaves the others usable.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from areal_mem.config import ConfigError

from .output import PROG, record_command, require

HELP = (
    "system benchmarks: async vs sync, memory vs ReAct, staleness, scale, soak, seeds, paper, cost; "
    "`all` writes the report"
)
BENCHES = {
    "async": "benchmarks.harness.asynchrony",
    "memory": "benchmarks.harness.memory",
    "staleness": "benchmarks.harness.staleness",
    "scale": "benchmarks.harness.scale",
    "soak": "benchmarks.harness.soak",
    "eval": "benchmarks.harness.eval_overhead",
    "seeds": "benchmarks.harness.seeds",
    "paper": "benchmarks.harness.paper",
    "cost": "benchmarks.harness.cost_model",
    "retrieval": "benchmarks.harness.retrieval",
    "wiki": "benchmarks.harness.wiki_retrieval",
    "lora": "benchmarks.bench_lora",
    "all": "benchmarks.harness.report",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=HELP)
    sub = parser.add_subparsers(dest="bench", metavar="<bench>", required=True)
    for name, module_path in BENCHES.items():
        try:
            module = importlib.import_module(module_path)
        except ModuleNotFoundError as e:
            if e.name != module_path:
                raise
            p = sub.add_parser(name, help=f"(not available: {module_path} is not installed)")
            p.set_defaults(_bench=None, _missing=module_path, _needs=())
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_bench=module.run, _needs=tuple(getattr(module, "NEEDS", ())))
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args._bench is None:
        print(f"{PROG} {args.bench}: not available ({args._missing} is not installed)")
        return 2
    require(args._needs, f"{PROG} {args.bench}")  # before any arm starts: exits 2 naming the pip extra
    record_command(argv)
    try:
        return int(args._bench(args) or 0)
    except ConfigError as e:
        print(f"{PROG} {args.bench}: config error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.bench}: interrupted", file=sys.stderr)
        return 130
