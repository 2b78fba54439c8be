"""`areal-mem sft`: supervised warm start of the policy on context rows (jsonl or Arrow)."""

from __future__ import annotations

import argparse

from areal_mem.config.arguments import add_config_arguments, config_from_args

HELP = "supervised fine-tuning on context rows (loss on masked-in tokens); warm-starts tiny models"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    data_help = "context rows (.jsonl/.arrow/.parquet); adds to learner.sft.data"
    parser.add_argument("--data", action="append", default=[], metavar="FILE", help=data_help)
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    import sys

    from areal_mem.model_files import check_model_path

    from .sft import run_sft
    from .sft_data import SFTDataError, read_all

    cfg = config_from_args(args)
    try:
        rows = read_all(list(cfg.learner.sft.data) + list(args.data))
    except SFTDataError as e:
        print(f"areal-mem sft: {e}", file=sys.stderr)
        return 2
    check_model_path(cfg.model.path)  # by key, before DeepSpeed starts
    state = run_sft(cfg, rows)
    print(f"[sft] done: {state.step} steps over {len(rows)} rows", flush=True)
    return 0
