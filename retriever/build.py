"""Build an index from a corpus file: one streaming pass, bounded memory, manifest written last.

The manifest is removed first and written only when everything else is on disk, so a folder
whose build was interrupted is never loaded as an index.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Optional, Union

from tqdm import tqdm

from areal_mem.config.retriever import IndexKind, RetrieverConfig

from .corpus import CorpusReader, index_text
from .docstore import DocWriter
from .manifest import MANIFEST, Manifest

if TYPE_CHECKING:  # imported where used: each pulls in its own heavy library
    from .dense import DenseIndexBuilder
    from .sparse import BM25Builder


def build_index(
    corpus_path: str,
    out_dir: str,
    kind: IndexKind | str = IndexKind.dense,
    cfg: Optional[RetrieverConfig] = None,
    encoder=None,
    show_progress: bool = True,
) -> Manifest:
    """Write `docs.arrow`, the index (faiss or bm25s) and `manifest.json` into `out_dir`.

    `cfg` carries the encoder, faiss and BM25 settings (defaults: MiniLM, Flat, lucene BM25);
    `encoder` may pass an already loaded `Encoder` (it must match `cfg.encoder`).
    """
    cfg = cfg or RetrieverConfig()
    kind = IndexKind(kind)
    os.makedirs(out_dir, exist_ok=True)
    manifest_path = os.path.join(out_dir, MANIFEST)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)

    start = time.perf_counter()
    bar = tqdm(desc=f"index {kind.value}", unit="passage", disable=not show_progress)
    builder: Union[DenseIndexBuilder, BM25Builder]
    if kind == IndexKind.dense:
        from .dense import DenseIndexBuilder
        from .encoder import load_encoder

        encoder = encoder or load_encoder(cfg.encoder)
        builder = DenseIndexBuilder(encoder.dim, cfg.faiss)

        def add(texts):
            builder.add(encoder.encode_passages(texts, progress=bar.update))
    else:
        from .sparse import BM25Builder

        builder = BM25Builder(cfg.bm25)

        def add(texts):
            builder.add(texts)
            bar.update(len(texts))

    reader = CorpusReader(corpus_path)
    docs = DocWriter(out_dir)
    try:
        for chunk in reader.chunks(cfg.chunk_size):
            add([index_text(p, cfg.split_title) for p in chunk])
            docs.write(chunk)
    finally:
        docs.close()
        bar.close()
    settings = builder.write(out_dir)

    manifest = Manifest(
        kind=kind.value,
        count=reader.count,
        corpus_path=os.path.abspath(corpus_path),
        corpus_checksum=reader.checksum,
        split_title=cfg.split_title,
        dim=encoder.dim if kind == IndexKind.dense else 0,
        encoder=encoder.identity() if kind == IndexKind.dense else {},
        index=settings,
        build_seconds=round(time.perf_counter() - start, 3),
    )
    manifest.save(out_dir)
    return manifest
