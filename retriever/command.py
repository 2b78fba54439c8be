"""`areal-mem retriever build|import|serve`: build an index from a corpus file, import a faiss
index built elsewhere (Search-R1's wiki-18 `e5_Flat.index`) without copying it, serve either over HTTP.

All take the run config (`--config FILE ... retriever.key=value`); the flags below are
shorthands that win over the config.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

from areal_mem.config import RunConfig, load_config
from areal_mem.config.arguments import add_config_arguments, add_serve_parser
from areal_mem.config.model import ModelConfig

HELP = "build a dense (faiss) or BM25 index of a corpus, import a faiss index built elsewhere, or serve one over HTTP"
TOKEN_ENV = "AREAL_MEM_RETRIEVER_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)

    b = sub.add_parser(
        "build",
        help="index a wiki-18 style corpus (jsonl or jsonl.gz)",
        description="Encode/tokenise the corpus in chunks (bounded memory, progress bar) "
        "and write the index, docs.arrow and manifest.json into --out.",
    )
    b.add_argument("--corpus", required=True, metavar="FILE", help='jsonl(.gz) lines {"id", "contents"}')
    b.add_argument("--out", required=True, metavar="DIR", help="index folder to write")
    b.add_argument("--kind", choices=["dense", "bm25"], help="index kind (config: retriever.kind)")
    b.add_argument(
        "--encoder",
        metavar="PATH",
        help="dense encoder folder (config: retriever.encoder.path; default: the packaged MiniLM)",
    )
    b.add_argument("--faiss", choices=["flat", "hnsw", "ivfpq"], help="faiss index type (config: retriever.faiss.type)")
    b.add_argument("--chunk-size", type=int, help="passages per chunk (config: retriever.chunk_size)")
    b.add_argument(
        "--split-title",
        action="store_true",
        default=None,
        help='index only the text after the "Title" line (config: retriever.split_title)',
    )
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_arguments(b)

    i = sub.add_parser(
        "import",
        help="import a faiss index built elsewhere (Search-R1's e5_Flat.index) with its corpus",
        description="Check a faiss Flat/HNSW inner-product index against its corpus (row i = line i) and "
        "the encoder, then write an index folder that `retriever serve` serves: the index and corpus are "
        "hard-linked (same filesystem) or referenced, never copied; offsets.u64 locates each corpus line.",
    )
    i.add_argument("--faiss", required=True, metavar="FILE", help="the faiss index file (e.g. e5_Flat.index)")
    i.add_argument("--corpus", required=True, metavar="FILE", help="the plain jsonl it was built from (wiki-18.jsonl)")
    i.add_argument("--out", required=True, metavar="DIR", help="index folder to write")
    i.add_argument(
        "--encoder",
        metavar="PATH",
        help="the encoder the index was built with, folder or hub id (config: retriever.encoder.path; "
        "wiki-18: intfloat/e5-base-v2)",
    )
    i.add_argument("--pooling", choices=["mean", "cls"], help="config: retriever.encoder.pooling (e5: mean)")
    i.add_argument("--query-prefix", metavar="TEXT", help="config: retriever.encoder.query_prefix (e5: 'query: ')")
    i.add_argument(
        "--passage-prefix", metavar="TEXT", help="config: retriever.encoder.passage_prefix (e5: 'passage: ')"
    )
    i.add_argument("--max-length", type=int, metavar="N", help="config: retriever.encoder.max_length (Search-R1: 256)")
    i.add_argument("--reference", action="store_true", help="reference the files by absolute path, never hard-link")
    i.add_argument("--sample", type=int, default=16, metavar="N", help="passages in the self-retrieval check")
    i.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_arguments(i)

    s = add_serve_parser(
        sub,
        "retriever",
        "serve an index: /search, /batch_search, /retrieve, /health",
        "Serve MemSearcher's (/search, /batch_search) and Search-R1's (/retrieve) APIs. "
        f"A non-loopback --host needs retriever.token (or ${TOKEN_ENV}).",
    )
    s.add_argument("--index", metavar="DIR", help="index folder (config: retriever.index_dir)")
    s.add_argument("--corpus", metavar="FILE", help="refuse to start unless the index was built from this corpus")
    s.add_argument(
        "--encoder",
        metavar="PATH",
        help="query encoder; refused unless it matches the index's (default: the one the manifest names)",
    )
    s.add_argument(
        "--max-batch-size",
        type=int,
        help="queries per micro-batch; 1 = one at a time (config: retriever.max_batch_size)",
    )
    s.add_argument("--batch-window-ms", type=float, help="micro-batch wait (config: retriever.batch_window_ms)")


@dataclass
class RetrieverRun(RunConfig):
    """The run schema, except that the retriever needs no policy model, so none is required."""

    model: ModelConfig = field(default_factory=lambda: ModelConfig(path=""))


def _retriever_config(args: argparse.Namespace):
    from omegaconf import OmegaConf

    return OmegaConf.to_object(load_config(args.config, args.overrides, schema=RetrieverRun).retriever)


def run(args: argparse.Namespace) -> int:
    from areal_mem.extras import MissingExtra
    from areal_mem.security import InsecureBindError

    from .corpus import CorpusError
    from .manifest import IndexMismatchError

    try:
        return {"build": _build, "import": _import, "serve": _serve}[args.action](args)
    except (CorpusError, IndexMismatchError, InsecureBindError, FileNotFoundError, MissingExtra) as e:
        print(f"areal-mem retriever {args.action}: {e}", file=sys.stderr)
        return 2


def _build(args: argparse.Namespace) -> int:
    from areal_mem.config.retriever import FaissIndexType, IndexKind
    from areal_mem.extras import require

    from .build import build_index
    from .encoder import set_threads

    rc = _retriever_config(args)
    if args.kind:
        rc.kind = IndexKind(args.kind)
    if args.encoder:
        rc.encoder.path = args.encoder
    if args.faiss:
        rc.faiss.type = FaissIndexType(args.faiss)
    if args.chunk_size:
        rc.chunk_size = args.chunk_size
    if args.split_title:
        rc.split_title = True
    if rc.kind == IndexKind.dense:  # before the corpus is read
        require(("cpu", "gpu"), ["faiss"], "a dense index")
    set_threads(rc.threads)
    m = build_index(args.corpus, args.out, rc.kind, rc, show_progress=not args.quiet)
    rate = m.count / m.build_seconds if m.build_seconds else float("nan")
    print(f"built {m.kind} index of {m.count} passages in {m.build_seconds:.1f}s ({rate:.0f} passages/s) -> {args.out}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from areal_mem.config.retriever import Pooling
    from areal_mem.extras import require

    from .encoder import set_threads
    from .importer import import_index

    rc = _retriever_config(args)
    enc = rc.encoder
    for flag, key in (("encoder", "path"), ("query_prefix", "query_prefix"), ("passage_prefix", "passage_prefix")):
        if getattr(args, flag) is not None:
            setattr(enc, key, getattr(args, flag))
    if args.pooling:
        enc.pooling = Pooling(args.pooling)
    if args.max_length:
        enc.max_length = args.max_length
    if args.sample < 1:
        print("areal-mem retriever import: --sample must be at least 1", file=sys.stderr)
        return 2
    require(("cpu", "gpu"), ["faiss"], "importing a faiss index")
    set_threads(rc.threads)
    m = import_index(
        args.faiss,
        args.corpus,
        args.out,
        enc,
        reference=args.reference,
        sample=args.sample,
        show_progress=not args.quiet,
        max_passage_bytes=rc.max_passage_bytes,
    )
    imp = m.imported
    print(
        f"imported {imp['index']['factory']} index of {m.count} passages ({imp['index']['linked']} {imp['index']['file']}, "
        f"corpus {imp['corpus']['linked']} {imp['corpus']['file']}) in {m.build_seconds:.1f}s -> {args.out}"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from areal_mem.config.retriever import IndexKind
    from areal_mem.extras import require
    from areal_mem.security import check_bind

    from .encoder import set_threads
    from .index import load_index
    from .manifest import MANIFEST, Manifest
    from .server import serve

    rc = _retriever_config(args)
    for flag, key in (
        ("host", "host"),
        ("port", "port"),
        ("max_batch_size", "max_batch_size"),
        ("batch_window_ms", "batch_window_ms"),
    ):
        if getattr(args, flag) is not None:
            setattr(rc, key, getattr(args, flag))
    rc.token = rc.token or os.environ.get(TOKEN_ENV, "")
    index_dir = args.index or rc.index_dir
    if os.path.isfile(os.path.join(index_dir, MANIFEST)) and Manifest.load(index_dir).kind == IndexKind.dense.value:
        require(("cpu", "gpu"), ["faiss"], "a dense index")  # before the encoder and the index load
    check_bind("retriever", rc.host, rc.token)  # before the slow index load
    set_threads(rc.threads)
    explicit_encoder = None
    if args.encoder or rc.encoder.path:
        rc.encoder.path = args.encoder or rc.encoder.path
        explicit_encoder = rc.encoder
    index = load_index(
        index_dir,
        encoder=explicit_encoder,
        corpus_path=args.corpus,
        faiss=rc.faiss,
        device=rc.encoder.device,
        dtype=rc.encoder.dtype,
        max_passage_bytes=rc.max_passage_bytes,
    )
    serve(index, rc, ready_file=args.ready_file)
    return 0
