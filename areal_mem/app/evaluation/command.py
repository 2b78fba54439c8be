"""`areal-mem eval`: run a workflow greedily on a question file and write results + summary.json."""

from __future__ import annotations

import argparse

from areal_mem.config.arguments import add_config_arguments

HELP = "evaluate a workflow (memsearcher | react | plugin) on a question file: EM, F1, turns, context length"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    data_help = "FlashRAG jsonl or Search-R1 parquet (config: eval.data; default: the world's test split)"
    parser.add_argument("--data", metavar="FILE", help=data_help)
    method_help = "workflow: memsearcher | react | registered name | module:attribute (config: eval.method; default: rollout.workflow)"
    parser.add_argument("--method", metavar="NAME", help=method_help)
    parser.add_argument("--limit", type=int, help="first N questions only (config: eval.limit)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def printed_keys(summary: dict) -> tuple:
    """The summary's line on stdout: the answer metrics of question answering; for a workflow
    scored without them (a plugin's own reward, the calculator example's) its mean reward, which
    is then the only score there is (its EM, F1 and accuracy are None)."""
    if summary["em"] is None and summary["f1"] is None and summary["acc"] is None:
        return ("method", "questions", "reward", "mean_turns")
    return ("method", "questions", "em", "f1", "acc", "mean_turns")


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import sys

    from areal_mem.config.arguments import config_from_args
    from areal_mem.data import DataError
    from areal_mem.model_files import check_model_path
    from areal_mem.rollout.registry import PluginError

    from ..launch.plan import require_extras
    from .evaluate import run_eval
    from .runner import EvalStopped

    overrides = list(args.overrides)
    for flag, key in ((args.data, "eval.data"), (args.method, "eval.method"), (args.limit, "eval.limit")):
        if flag is not None:
            overrides.append(f"{key}={flag}")
    args.overrides = overrides
    cfg = config_from_args(args)
    # before any server starts: what is missing from the install first (the retriever it may
    # start over a dense index needs faiss), then the model folder, by key
    replay_only = bool(cfg.rollout.replay_tools) and not cfg.rollout.replay_fallback
    require_extras(cfg, launcher=False, retriever=not replay_only, curve=False)
    check_model_path(cfg.model.path)
    try:
        summary, out_dir = run_eval(cfg, progress=not args.quiet)
    except (DataError, PluginError, FileNotFoundError) as e:
        print(f"areal-mem eval: {e}", file=sys.stderr)
        return 2
    except EvalStopped as e:  # a server gave out mid-way: said in one line, what was answered kept
        print(f"areal-mem eval: {e}", file=sys.stderr)
        return 1
    print(json.dumps({k: summary[k] for k in printed_keys(summary)}))
    print(f"results in {os.path.join(out_dir, 'results.jsonl')}, summary in {os.path.join(out_dir, 'summary.json')}")
    return 0
