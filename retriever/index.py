"""Load a built index (any kind) and search it: queries in, `{"id", "contents"}` documents out."""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

from areal_mem.config.retriever import Dtype, EncoderConfig, FaissConfig, IndexKind, Pooling

from .corpus import corpus_checksum
from .docstore import DocStore, OffsetDocStore
from .manifest import IndexMismatchError, Manifest

Hits = List[Tuple[dict, float]]


class Index:
    def __init__(self, manifest: Manifest, docs: DocStore | OffsetDocStore, searcher):
        self.manifest, self.docs, self.searcher = manifest, docs, searcher

    @property
    def count(self) -> int:
        return self.manifest.count

    def search(self, queries: List[str], k: int) -> List[Hits]:
        """Top-`k` (document, score) per query, best first; one encoder/index call for the batch."""
        k = min(k, self.count)
        rows, scores = self.searcher.search(list(queries), k)
        hits = [[(row, score) for row, score in zip(r, s) if row >= 0] for r, s in zip(rows.tolist(), scores.tolist())]
        docs = iter(self.docs.get([row for h in hits for row, _ in h]))  # one lookup for the batch
        return [[(next(docs), float(score)) for _, score in h] for h in hits]


def _encoder_from_manifest(manifest: Manifest, device: str, dtype: Dtype) -> EncoderConfig:
    e = manifest.encoder
    return EncoderConfig(
        path=e["path"],
        pooling=Pooling(e["pooling"]),
        normalize=e["normalize"],
        query_prefix=e["query_prefix"],
        passage_prefix=e["passage_prefix"],
        max_length=e["max_length"],
        device=device,
        dtype=Dtype(dtype),
    )


def load_index(
    index_dir: str,
    encoder: Optional[EncoderConfig] = None,
    corpus_path: Optional[str] = None,
    faiss: Optional[FaissConfig] = None,
    device: str = "cpu",  # for the encoder named by the manifest
    dtype: Dtype | str = Dtype.float32,  # likewise
    max_passage_bytes: int = 1 << 20,  # retriever.max_passage_bytes: a longer passage is refused
) -> Index:
    """Open `index_dir`; refuse it if `corpus_path` or the encoder does not match its manifest.

    Without `encoder`, a dense index is queried with the encoder its manifest names, and the
    weights found there must still be the ones it was built with.
    """
    manifest = Manifest.load(index_dir)
    if corpus_path is not None:
        checksum, count = corpus_checksum(corpus_path)
        manifest.check_corpus(checksum, count, corpus_path)
    faiss_path = ""
    docs: Union[OffsetDocStore, DocStore]
    if manifest.docstore == "offsets":  # `retriever import`: the corpus file read by offset
        from .importer import check_imported, resolve

        faiss_path, corpus_file = check_imported(index_dir, manifest)
        docs = OffsetDocStore(corpus_file, resolve(index_dir, manifest.imported["offsets"]))
    elif manifest.docstore == "arrow":
        docs = DocStore(index_dir)
    else:
        raise IndexMismatchError(f"{index_dir}: unknown docstore {manifest.docstore!r} in its manifest")
    from .importer import check_passage_length

    check_passage_length(docs, max_passage_bytes)
    if len(docs) != manifest.count:
        raise IndexMismatchError(
            f"{index_dir}: the {manifest.docstore} docstore holds {len(docs)} documents, manifest says {manifest.count}"
        )
    if IndexKind(manifest.kind) == IndexKind.bm25:
        from .sparse import BM25Searcher

        return Index(manifest, docs, BM25Searcher(index_dir))

    from .dense import DenseSearcher
    from .encoder import load_encoder

    given = encoder is not None
    enc = load_encoder(encoder if encoder is not None else _encoder_from_manifest(manifest, device, Dtype(dtype)))
    manifest.check_encoder(enc.identity(), where=None if given else "the model at that path has changed")
    return Index(manifest, docs, DenseSearcher(index_dir, enc, faiss or FaissConfig(), path=faiss_path))
