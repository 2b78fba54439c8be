"""`areal-mem buffer serve`: run the replay buffer service.

Serve the replay buffer over Arrow Flight. Accepted groups are stored under <run-dir>/buffer
and served again after a restart until acked. Config keys: buffer.* (see docs/buffer.md); the
token may come from $AREAL_MEM_BUFFER_TOKEN instead of the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from dataclasses import replace

from ..wire import TOKEN_ENV

HELP = "the Arrow Flight replay buffer (subcommand: serve)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from areal_mem.config.arguments import add_serve_parser

    sub = parser.add_subparsers(dest="buffer_command", metavar="<subcommand>", required=True)
    serve = add_serve_parser(sub, "buffer", "serve the buffer until SIGTERM/SIGINT", __doc__)
    serve.add_argument("--run-dir", help="run directory (default: run_dir of the config)")


def model_vocab_size(path: str) -> int:
    """`vocab_size` of the model's config.json (the embedding rows every token id indexes); 0 when
    the model is not there yet (it may be built after the buffer starts) or names none."""
    import json

    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            size = json.load(f).get("vocab_size", 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0
    return size if isinstance(size, int) and size > 0 else 0


def run(args: argparse.Namespace) -> int:
    from ...config import load_run
    from ...process import write_ready_file
    from ...security import InsecureBindError
    from .service import BufferService

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = load_run(args.config, args.overrides, optional=["model.path"])
    b = cfg.buffer
    run_dir = args.run_dir or cfg.run_dir
    b = replace(
        b,
        host=args.host or b.host,
        port=b.port if args.port is None else args.port,
        token=b.token or os.environ.get(TOKEN_ENV, ""),
        max_running_groups=b.max_running_groups or cfg.rollout.num_workers * cfg.rollout.max_concurrent_groups,
        vocab_size=b.vocab_size or model_vocab_size(cfg.model.path),
    )
    try:
        service = BufferService(os.path.join(run_dir, "buffer"), b)
    except (InsecureBindError, ValueError) as e:
        print(f"areal-mem buffer: {e}", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: threading.Thread(target=service.shutdown).start())
    stats = service.stats()
    print(
        f"areal-mem buffer: serving {service.url} (run dir {run_dir}; {stats['pending_groups']} group(s) "
        f"recovered, version {stats['version']})",
        flush=True,
    )
    write_ready_file(args.ready_file, service.url)
    service.serve()
    print("areal-mem buffer: stopped", flush=True)
    return 0
