"""`areal-mem data convert IN OUT`: convert question files between FlashRAG jsonl and Search-R1 parquet."""
from __future__ import annotations

import argparse
import sys

HELP = "convert question files between FlashRAG jsonl (areal-mem's task format) and Search-R1 parquet"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)
    conv = sub.add_parser("convert", help="read IN, write OUT (formats from .jsonl/.parquet or the flags)")
    conv.add_argument("input", metavar="IN")
    conv.add_argument("output", metavar="OUT")
    formats = ["flashrag", "searchr1"]
    conv.add_argument("--from", dest="src", choices=formats, help="format of IN (default: by extension)")
    conv.add_argument("--to", dest="dst", choices=formats, help="format of OUT (default: by extension)")
    conv.add_argument("--limit", type=int, default=0, help="keep only the first N questions (0: all)")


def run(args: argparse.Namespace) -> int:
    from . import DataError, read_tasks, write_tasks

    try:
        tasks = read_tasks(args.input, args.src)
        if args.limit:
            tasks = tasks[: args.limit]
        n = write_tasks(tasks, args.output, args.dst)
    except DataError as e:
        print(f"areal-mem data: {e}", file=sys.stderr)
        return 2
    print(f"wrote {n} questions to {args.output}")
    return 0
