"""`areal-mem world`: build the synthetic search world."""

from __future__ import annotations

import argparse
import json
import time

from areal_mem.config.world import QuestionType

from .questions import BRIDGE, MAX_HOPS, MIN_HOPS

HELP = "build the synthetic search world (corpus + FlashRAG question splits)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passages", type=int, default=2000, help="about this many corpus passages")
    parser.add_argument("--questions", type=int, default=5000, help="questions over all splits")
    parser.add_argument("--dev-fraction", type=float, default=0.1)
    parser.add_argument("--test-fraction", type=float, default=0.1)
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
    parser.add_argument("--hops", type=int, default=2, help=hops_help)


def run(args: argparse.Namespace) -> int:
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
