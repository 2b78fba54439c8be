"""The real retrieval service over an index of random vectors, for `python -m benchmarks retrieval`.

A wiki-18-sized index cannot be encoded on this machine, so the scale benchmark stores random
unit vectors and sends each query as its vector: `vec:` + base64 of float16 values (2,052
characters at dimension 768, under `retriever.max_query_chars`). Everything after the encoder
is the service users run: the HTTP routes, request checks, micro-batcher, `DenseSearcher` (torch
matrix product for a Flat batch, faiss for HNSW and IVF-PQ) and the offsets docstore reading the
corpus file by row. Only `encode_queries` is replaced, by a decoder of the query's own vector.

    python -P benchmarks/harness/vector_service.py --dir D --faiss F --type hnsw --ready-file R
"""

from __future__ import annotations

import argparse
import base64
import os
from typing import List, Sequence

import numpy as np

PREFIX = "vec:"


def encode_vector(v: np.ndarray) -> str:
    """A query text that carries its own (unit) vector."""
    return PREFIX + base64.b64encode(np.asarray(v, dtype="<f2").tobytes()).decode()


class VectorQueries:
    """The encoder stand-in: decodes `vec:` texts; anything else is refused by name."""

    def __init__(self, dim: int):
        self.dim = dim

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            if not t.startswith(PREFIX):
                raise ValueError(f"query {i} is not a `{PREFIX}` vector query")
            v = np.frombuffer(base64.b64decode(t[len(PREFIX) :]), dtype="<f2")
            if v.size != self.dim:
                raise ValueError(f"query {i} carries {v.size} values, the index has dimension {self.dim}")
            out[i] = v
        return out


def serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", required=True, help="the corpus folder: corpus.jsonl and offsets.u64")
    parser.add_argument("--faiss", required=True, help="the faiss index file")
    parser.add_argument("--type", required=True, choices=["flat", "hnsw", "ivfpq"])
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--ef-search", type=int, default=128)
    parser.add_argument("--nprobe", type=int, default=16)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--mmap", action="store_true", help="memory-map Flat/HNSW vectors (retriever.faiss.mmap)")


def main(argv: List[str] | None = None) -> None:
    from areal_mem.config.retriever import FaissConfig, FaissIndexType, RetrieverConfig
    from areal_mem.retriever.dense import DenseSearcher
    from areal_mem.retriever.docstore import OFFSETS, OffsetDocStore
    from areal_mem.retriever.encoder import set_threads
    from areal_mem.retriever.importer import CORPUS_FILE, describe_faiss, open_faiss
    from areal_mem.retriever.index import Index
    from areal_mem.retriever.manifest import Manifest
    from areal_mem.retriever.server import serve

    parser = argparse.ArgumentParser(description=__doc__)
    serve_args(parser)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    faiss_cfg = FaissConfig(
        type=FaissIndexType(args.type), hnsw_ef_search=args.ef_search, ivf_nprobe=args.nprobe, mmap=args.mmap
    )
    described = describe_faiss(open_faiss(args.faiss))
    docs = OffsetDocStore(os.path.join(args.dir, CORPUS_FILE), os.path.join(args.dir, OFFSETS))
    manifest = Manifest(
        kind="dense",
        count=len(docs),
        corpus_path=os.path.join(args.dir, CORPUS_FILE),
        corpus_checksum="",
        split_title=False,
        dim=described["dim"],
        encoder={"path": "random vectors (benchmark)"},
        index=described,
        docstore="offsets",
    )
    searcher = DenseSearcher(args.dir, VectorQueries(described["dim"]), faiss_cfg, path=args.faiss)
    serve(Index(manifest, docs, searcher), RetrieverConfig(max_batch_size=args.max_batch_size), args.ready_file)


if __name__ == "__main__":
    main()
