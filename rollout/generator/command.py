"""`areal-mem generator serve`: the embedded generator server (SGLang's HTTP API, PyTorch)."""
from __future__ import annotations

import argparse
import os

from areal_mem.config.generator import GeneratorConfig

HELP = "generator servers: `serve` runs the embedded PyTorch server that speaks SGLang's HTTP API"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)
    d = GeneratorConfig()
    p = sub.add_parser("serve", help="serve a Hugging Face causal LM with continuous batching",
                       description="Serve a Hugging Face causal LM over SGLang's native HTTP API "
                                   "(/generate, weight updates, pause/continue) with continuous "
                                   "batching and a KV cache. Binds 127.0.0.1 unless told otherwise; "
                                   "another address needs a token (env AREAL_MEM_GENERATOR_TOKEN).")
    p.add_argument("--model", required=True, help="model folder in Hugging Face format")
    p.add_argument("--host", default=d.host, help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=d.port, help="port; 0 lets the OS pick (default %(default)s)")
    p.add_argument("--port-file", default=None, help="write the bound port here once listening")
    p.add_argument("--max-batch-size", type=int, default=d.max_batch_size,
                   help="most requests decoded together (default %(default)s)")
    p.add_argument("--device", default=d.device, help="auto | cpu | cuda | cuda:N (default %(default)s)")
    p.add_argument("--dtype", default=d.dtype, choices=["float32", "bfloat16", "float16"])
    p.add_argument("--max-context-len", type=int, default=d.max_context_len,
                   help="prompt + output limit; 0: the model's max_position_embeddings")
    p.add_argument("--weight-group-timeout", type=float, default=d.weight_group_timeout_s,
                   help="seconds to wait for the weight-update group's rendezvous and broadcasts")
    p.add_argument("--torch-threads", type=int, default=d.torch_threads,
                   help="torch CPU threads; 0: torch's default, all cores (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    import torch

    from areal_mem.security import check_bind

    from .launch import TOKEN_ENV
    from .server import build_server, serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token = os.environ.get(TOKEN_ENV, "")
    check_bind("generator", args.host, token)
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    server = build_server(args.model, args.max_batch_size, args.device, args.dtype,
                          args.max_context_len, token, args.weight_group_timeout)

    async def main() -> None:
        task = asyncio.ensure_future(serve(server, args.host, args.port, args.port_file))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    return 0
