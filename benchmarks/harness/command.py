"""`areal-mem bench <name>`: one benchmark, or `all` of them and the report.

Each entry of `BENCHES` is a module with `HELP`, `add_arguments(parser)` and `run(args)`,
imported only when its parser is built, so a missing one (e.g. `soak`, written separately)
leaves the others usable.
"""

from __future__ import annotations

import argparse
import importlib

HELP = (
    "system benchmarks: async vs sync, memory vs ReAct, staleness, scale, soak, seeds, paper; `all` writes the report"
)
BENCHES = {
    "async": "areal_mem.app.bench.asynchrony",
    "memory": "areal_mem.app.bench.memory",
    "staleness": "areal_mem.app.bench.staleness",
    "scale": "areal_mem.app.bench.scale",
    "soak": "areal_mem.app.bench.soak",
    "eval": "areal_mem.app.bench.eval_overhead",
    "seeds": "areal_mem.app.bench.seeds",
    "paper": "areal_mem.app.bench.paper",
    "all": "areal_mem.app.bench.report",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="<bench>", required=True)
    for name, module_path in BENCHES.items():
        try:
            module = importlib.import_module(module_path)
        except ModuleNotFoundError as e:
            if e.name != module_path:
                raise
            p = sub.add_parser(name, help=f"(not available: {module_path} is not installed)")
            p.set_defaults(_bench=None, _missing=module_path)
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_bench=module.run)


def run(args: argparse.Namespace) -> int:
    if args._bench is None:
        print(f"areal-mem bench {args.bench}: not available ({args._missing} is not installed)")
        return 2
    return int(args._bench(args) or 0)
