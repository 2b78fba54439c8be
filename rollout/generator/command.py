"""`areal-mem generator serve`: one generator server, configured by `generator.*`.

With `generator.backend: embedded` (the default) it is the embedded PyTorch server that
speaks SGLang's HTTP API; with `sglang` it runs `python -m sglang.launch_server` in the
foreground. Either way the URL goes to `--ready-file` once the server answers `/health`.
The embedded backend decodes with continuous batching and a KV cache on CPU or one GPU.
Config keys: generator.* (see docs/generator.md), e.g. generator.embedded.max_batch_size=32
generator.embedded.device=cpu. Binds 127.0.0.1 unless told otherwise; another address needs a token
(generator.token or $AREAL_MEM_GENERATOR_TOKEN).
"""

from __future__ import annotations

import argparse

from areal_mem.config import RunConfig
from areal_mem.config.generator import GeneratorBackend

HELP = "generator servers (subcommand: serve): the embedded PyTorch server or SGLang"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from areal_mem.config.arguments import add_serve_parser

    sub = parser.add_subparsers(dest="generator_command", metavar="<subcommand>", required=True)
    help = "serve a Hugging Face causal LM over SGLang's HTTP API until SIGTERM/SIGINT"
    p = add_serve_parser(sub, "generator", help, __doc__)
    p.add_argument("--model", help="model folder in Hugging Face format (default: model.path)")
    p.add_argument(
        "--weight-version", default="0", help="version of the weights it starts with, e.g. after a restart (default 0)"
    )
    p.add_argument(
        "--paused",
        action="store_true",
        help="start paused: /generate waits for /continue_generation (a restarted server "
        "that must first receive the learner's current weights)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os
    import signal
    import sys

    from areal_mem.config import ConfigError, load_run
    from areal_mem.process import write_ready_file
    from areal_mem.security import InsecureBindError, check_bind

    from .client import TOKEN_ENV
    from .launch import lora_args

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = load_run(args.config, args.overrides, optional=["model.path"])
    g = cfg.generator
    model = args.model or cfg.model.path
    if not model:
        raise ConfigError("no model: pass --model PATH or set model.path")
    host = args.host or g.host
    port = g.port if args.port is None else args.port
    token = g.token or os.environ.get(TOKEN_ENV, "")
    try:
        check_bind("generator", host, token)
    except InsecureBindError as e:
        print(f"areal-mem generator: {e}", file=sys.stderr)
        return 2
    if g.backend == GeneratorBackend.sglang:
        tp = cfg.launcher.gpus_per_generator  # the launcher's CUDA_VISIBLE_DEVICES holds that many GPUs
        extra = list(g.sglang_args) + lora_args(g.lora)
        return _serve_sglang(model, host, port, token, extra, g.startup_timeout_s, args.ready_file, tp)

    import torch

    from .embedded.server import build_server, serve

    emb = g.embedded
    if emb.torch_threads > 0:
        torch.set_num_threads(emb.torch_threads)
    server = build_server(model, emb, token, args.weight_version, _weights_dirs(cfg, model), g.lora)
    if args.paused:
        server.service.engine.pause("abort")

    async def main() -> None:
        task = asyncio.ensure_future(serve(server, host, port, lambda url: write_ready_file(args.ready_file, url)))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    print("areal-mem generator: stopped", flush=True)
    # Everything is closed; skip the interpreter's teardown of torch and transformers, which
    # takes seconds on a busy CPU and would slow every restart and test.
    logging.shutdown()
    os._exit(0)


def _weights_dirs(cfg: RunConfig, model: str) -> list:
    """Where /update_weights_from_disk may load: `generator.embedded.weights_dirs`, else the served model,
    `model.path` and the disk publisher's `<run_dir>/weights` (a restart serves a push from there)."""
    import os

    if cfg.generator.embedded.weights_dirs:
        dirs = list(cfg.generator.embedded.weights_dirs)
    else:
        dirs = [model, cfg.model.path or model, os.path.join(cfg.run_dir, "weights")]
    return [os.path.abspath(d) for d in dirs]  # as resolved at start, whatever the working folder later


def _serve_sglang(
    model: str, host: str, port: int, token: str, extra, timeout_s: float, ready_file, tp_size: int
) -> int:
    """SGLang in the foreground: ready once healthy, stopped with this process."""
    import signal

    from areal_mem.process import write_ready_file

    from .launch import start_sglang_servers

    (handle,) = start_sglang_servers(model, 1, host, port, token, extra, timeout_s, gpus_per_server=tp_size)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: handle.stop())
    print(f"areal-mem generator: SGLang serving {model} on {handle.url}", flush=True)
    write_ready_file(ready_file, handle.url)
    assert handle.child.proc is not None  # start_sglang_servers returns started children
    return handle.child.proc.wait()
