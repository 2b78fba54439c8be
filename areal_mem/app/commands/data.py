"""`areal-mem data`: `convert IN OUT` (reads FlashRAG / ASearcher jsonl and Search-R1 / MemSearcher
parquet, writes FlashRAG jsonl or Search-R1 parquet); `demos` (oracle SFT rows)."""

from __future__ import annotations

import argparse
import sys

from areal_mem.config.arguments import add_config_arguments, config_from_args

HELP = (
    "question files: convert FlashRAG/ASearcher jsonl or Search-R1/MemSearcher parquet to FlashRAG jsonl "
    "(areal-mem's task format) or Search-R1 parquet; write oracle demonstrations for SFT"
)
READ = ["flashrag", "asearcher", "searchr1", "memsearcher"]
WRITE = ["flashrag", "searchr1"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)
    conv = sub.add_parser(
        "convert",
        help="read IN (format detected from its columns or first line), write OUT (format by .jsonl/.parquet)",
    )
    conv.add_argument("input", metavar="IN")
    conv.add_argument("output", metavar="OUT")
    conv.add_argument(
        "--from",
        "--format",
        dest="src",
        choices=READ,
        help="format of IN (default: detected; parquet by its columns, jsonl by its first line's keys)",
    )
    conv.add_argument("--to", dest="dst", choices=WRITE, help="format of OUT (default: by extension)")
    conv.add_argument("--limit", type=int, default=0, help="keep only the first N questions (0: all)")
    # defaults: areal_mem/data/records.py TextLimits (not imported here: `--help` stays instant)
    conv.add_argument("--max-question-chars", type=int, help="refuse a question longer than this (default 8192)")
    conv.add_argument("--max-answer-chars", type=int, help="refuse an answer longer than this (default 2048)")
    demos = sub.add_parser(
        "demos",
        help="write the scripted oracle's MemSearcher demonstrations (context "
        "rows, jsonl) for `areal-mem sft`; uses world.dir, model.path, "
        "the rollout settings and the retriever (started when none is set)",
    )
    add_config_arguments(demos)
    demos.add_argument("--out", required=True, metavar="FILE", help="jsonl of context rows to write")
    demos.add_argument("--split", default="train", choices=["train", "dev", "test"], help="world split")
    demos.add_argument("--limit", type=int, default=0, help="first N questions (0: all)")
    demos.add_argument(
        "--mistakes",
        type=float,
        default=0.1,
        help="share of oracle decisions that go wrong (wrong search, forgotten fact, wrong answer)",
    )
    demos.add_argument("--seed", type=int, default=0)
    demos.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    return _demos(args) if args.action == "demos" else _convert(args)


def _demos(args: argparse.Namespace) -> int:
    from areal_mem.app.demonstrations import write_demonstrations
    from areal_mem.data import DataError

    try:
        stats = write_demonstrations(
            config_from_args(args),
            args.out,
            split=args.split,
            limit=args.limit,
            mistake_rate=args.mistakes,
            seed=args.seed,
            progress=not args.quiet,
        )
    except (DataError, FileNotFoundError, ValueError) as e:
        print(f"areal-mem data demos: {e}", file=sys.stderr)
        return 2
    print(
        f"wrote {stats['rows']} context rows for {stats['questions']} questions to {args.out} "
        f"(oracle EM {stats['em']:.3f}, mean reward {stats['reward']:.3f})"
    )
    return 0


def _convert(args: argparse.Namespace) -> int:
    from areal_mem.data import DataError, convert
    from areal_mem.data.records import TextLimits

    given = {"max_question_chars": args.max_question_chars, "max_answer_chars": args.max_answer_chars}
    limits = TextLimits(**{k: v for k, v in given.items() if v is not None})
    try:
        report, n = convert(args.input, args.output, args.src, args.dst, limit=args.limit, limits=limits)
    except DataError as e:
        print(f"areal-mem data: {e}", file=sys.stderr)
        return 2
    print(report.describe())
    print(f"wrote {n} questions to {args.output}")
    return 0
