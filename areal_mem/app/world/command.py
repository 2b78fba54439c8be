"""`areal-mem world [synthetic|wiki]`: build the synthetic search world, or the real-text one."""

from __future__ import annotations

import argparse
import json
import sys
import time

from areal_mem.config.world import QuestionType

from .questions import BRIDGE, MAX_HOPS, MIN_HOPS

HELP = "build a search world (corpus + FlashRAG question splits): synthetic (default) or wiki (real text)"
# the synthetic world's options and their defaults: `wiki` refuses any of them by name
SYNTHETIC_DEFAULTS = {"seed": 0, "passages": 2000, "questions": 5000, "test_fraction": 0.1, "hops": 2}
SYNTHETIC_FILTERS = ("question_types", "single_attributes", "bridge_chains")
WIKI_ONLY = ("k", "limit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kind_help = (
        "synthetic: a fictional encyclopedia (default); wiki: NQ/TriviaQA/FanOutQA questions over Wikipedia "
        "lead sections, read from PyPI packages (docs/wiki_world.md)"
    )
    parser.add_argument("kind", nargs="?", choices=("synthetic", "wiki"), default="synthetic", help=kind_help)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--dev-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=None, help="synthetic: the RNG seed (default 0)")
    parser.add_argument("--passages", type=int, default=None, help="synthetic: about this many passages (2000)")
    parser.add_argument("--questions", type=int, default=None, help="synthetic: questions over all splits (5000)")
    parser.add_argument("--test-fraction", type=float, default=None, help="synthetic: (0.1)")
    parser.add_argument("--k", type=int, default=None, help="wiki: keep a question whose answer is in BM25's top k (5)")
    parser.add_argument(
        "--limit", type=int, default=None, help="wiki: read only the first N rows of each question file"
    )
    types_help = "write only these question types (default: all)"
    parser.add_argument("--question-types", nargs="+", choices=[t.value for t in QuestionType], help=types_help)
    facts_help = "single-hop questions ask only for these facts, e.g. person.occupation (default: all)"
    parser.add_argument("--single-attributes", nargs="+", metavar="KIND.ATTR", help=facts_help)
    chains_help = "bridge questions follow only these chains, e.g. person.birthplace.country (default: all)"
    chains = [".".join(k) for k in BRIDGE]
    parser.add_argument("--bridge-chains", nargs="+", choices=chains, metavar="KIND.LINK.ATTR", help=chains_help)
    hops_help = (
        f"hops of every bridge question, {MIN_HOPS}-{MAX_HOPS} (default 2); above 2 the chains end in a "
        "--bridge-chains chain, e.g. 4: In which country is the employer of the creator of X headquartered?"
    )
    parser.add_argument("--hops", type=int, default=None, help=hops_help)


def run(args: argparse.Namespace) -> int:
    foreign = WIKI_ONLY if args.kind == "synthetic" else (*SYNTHETIC_DEFAULTS, *SYNTHETIC_FILTERS)
    given = [f"--{k.replace('_', '-')}" for k in foreign if getattr(args, k) is not None]
    if given:
        print(f"areal-mem world {args.kind}: {', '.join(given)} is not an option of this world kind", file=sys.stderr)
        return 2
    if args.kind == "wiki":
        return _run_wiki(args)
    for key, default in SYNTHETIC_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    from .build import build_world

    start = time.time()
    try:
        manifest = build_world(
            args.out,
            args.seed,
            args.passages,
            args.questions,
            args.dev_fraction,
            args.test_fraction,
            args.question_types,
            args.single_attributes,
            args.bridge_chains,
            args.hops,
        )
    except ValueError as e:
        print(f"areal-mem world: {e}")
        return 2
    print(json.dumps({k: manifest[k] for k in ("passages", "distractors", "questions")}, indent=1))
    print(f"world written to {args.out} in {time.time() - start:.1f}s")
    return 0


def _run_wiki(args: argparse.Namespace) -> int:
    from .wiki import build_wiki_world

    start = time.time()
    try:
        manifest = build_wiki_world(args.out, 5 if args.k is None else args.k, args.dev_fraction, args.limit)
    except ValueError as e:  # WikiSourceError included: a missing package or a bad file, in one line
        print(f"areal-mem world wiki: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: manifest[k] for k in ("passages", "splits", "questions")}, indent=1))
    print(f"world written to {args.out} in {time.time() - start:.1f}s")
    return 0
