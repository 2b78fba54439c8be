"""faiss inner-product indexes (Flat, HNSW, IVF-PQ) built chunk by chunk and searched in batches."""

from __future__ import annotations

import math
import os
from typing import Iterable, List, Optional, Tuple

import numpy as np
import torch

from areal_mem.config.retriever import FaissConfig, FaissIndexType

FAISS_FILE = "faiss.index"


def _faiss():
    """faiss comes from an extra (`cpu`: faiss-cpu, `gpu`: faiss-gpu-cu12), one build per install."""
    try:
        import faiss
    except ModuleNotFoundError:
        raise RuntimeError(
            "a dense index needs faiss, which the core install leaves out: pip install -e '.[cpu]' "
            "(faiss-cpu) or '.[gpu]' (faiss-gpu-cu12); retriever.kind=bm25 needs neither"
        ) from None
    return faiss


def _to_gpu(index, cfg: FaissConfig):
    """faiss-gpu when asked for; a clear error when it is not installed or cannot hold this type."""
    if not cfg.gpu:
        return index
    faiss = _faiss()
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        raise RuntimeError(
            "retriever.faiss.gpu is set, but faiss-gpu is not installed or sees no GPU; "
            "install the `gpu` extra or set retriever.faiss.gpu=false"
        )
    if FaissIndexType(cfg.type) == FaissIndexType.hnsw:
        raise RuntimeError("retriever.faiss.gpu: faiss has no GPU HNSW; use type flat or ivfpq on GPU")
    return faiss.index_cpu_to_all_gpus(index)


def _to_cpu(index, cfg: FaissConfig):
    return _faiss().index_gpu_to_cpu(index) if cfg.gpu else index


class DenseIndexBuilder:
    """Adds vectors chunk by chunk; IVF-PQ buffers the first `train_size` vectors to train on."""

    def __init__(self, dim: int, cfg: FaissConfig):
        self.dim, self.cfg = dim, cfg
        self.type = FaissIndexType(cfg.type)
        self._pending: List[np.ndarray] = []
        self._index = None
        if self.type != FaissIndexType.ivfpq:
            self._index = _to_gpu(self._factory(self._spec()), cfg)

    def _factory(self, spec: str):
        faiss = _faiss()
        return faiss.index_factory(self.dim, spec, faiss.METRIC_INNER_PRODUCT)

    def _spec(self, n_train: int = 0) -> str:
        if self.type == FaissIndexType.flat:
            return "Flat"
        if self.type == FaissIndexType.hnsw:
            return f"HNSW{self.cfg.hnsw_m}"
        nlist = self.cfg.ivf_nlist or max(1, min(int(4 * math.sqrt(n_train)), n_train // 39))
        m = self.cfg.pq_m or max(1, self.dim // 8)
        if self.dim % m:
            raise ValueError(f"retriever.faiss.pq_m={m} must divide the encoder dimension {self.dim}")
        return f"IVF{nlist},PQ{m}x{self.cfg.pq_nbits}"

    def add(self, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self._index is None:
            self._pending.append(vectors)
            if sum(len(v) for v in self._pending) >= self.cfg.train_size:
                self._train_and_flush()
            return
        self._index.add(vectors)

    def _train_and_flush(self) -> None:
        sample = np.concatenate(self._pending)
        self._pending = []
        train = sample[: self.cfg.train_size]
        index = _to_gpu(self._factory(self._spec(len(train))), self.cfg)
        index.train(train)
        index.add(sample)
        self._index = index

    def write(self, out_dir: str) -> dict:
        """Write the index; returns the settings for the manifest."""
        if self._index is None:
            if not self._pending:
                raise ValueError("cannot build an index of an empty corpus")
            self._train_and_flush()
        index = _to_cpu(self._index, self.cfg)
        _faiss().write_index(index, os.path.join(out_dir, FAISS_FILE))
        return {"type": self.type.value, "factory": _describe(index), "ntotal": int(index.ntotal)}


def _describe(index) -> str:
    faiss = _faiss()
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        pq = faiss.downcast_index(ivf).pq
        return f"IVF{ivf.nlist},PQ{pq.M}x{pq.nbits}"
    if isinstance(index, faiss.IndexHNSW):
        return f"HNSW{index.hnsw.nb_neighbors(1)}"
    return "Flat"


# A CPU Flat index is searched by torch matrix products + topk from this many queries on, or
# at any batch size from this many rows on. faiss's blocked CPU path cost ~8 ms/query at 64
# queries x 100k vectors on one core, the product ~1.4 ms/query; a lone query on a small index
# is faster through faiss (~7 ms vs ~13 ms at 100k, one thread), but faiss scans a lone query
# on one thread: at 1M rows on 2 threads torch answered 1 query in 0.29 s against faiss's 0.65 s,
# 4 queries in 0.60 s against 1.12 s (at wiki-18 size a lone query would take seconds on one core).
MATMUL_MIN_QUERIES = 8
MATMUL_MIN_ROWS = 1 << 18
# Rows scored per matrix product: a batch's score matrix is queries x this many floats, not
# queries x rows. At wiki-18's 21M rows one product for a batch of 128 would allocate a 10.8 GB
# matrix; 2**20-row blocks bound it to 0.5 GB (2**16-row blocks measured no faster at 1M rows).
SCORE_BLOCK_ROWS = 1 << 20
# Bytes read per step when a memory-mapped index is read into the page cache before serving.
WARM_READ_BYTES = 64 << 20


def warm_page_cache(path: str) -> None:
    """Read a memory-mapped index file once, sequentially, before the first search: otherwise
    the first batch pages 64.6 GB (wiki-18's Flat) in from disk at random, past the clients'
    timeouts. Whether the pages stay depends on the host's free memory (docs/retriever.md)."""
    size = os.path.getsize(path)
    print(f"retriever: reading {path} ({size / 1e9:.1f} GB) into the page cache", flush=True)
    buf = bytearray(WARM_READ_BYTES)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def topk_over_blocks(
    queries: torch.Tensor, blocks: Iterable[Tuple[int, torch.Tensor]], k: int
) -> Tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-`k` (rows, scores) of every query over `(first row, vectors)`
    blocks, merged block by block so that memory is one block's scores."""
    best_s: Optional[torch.Tensor] = None
    best_i = torch.zeros((len(queries), 0), dtype=torch.long)
    for start, block in blocks:
        top = torch.topk(queries @ block.T, min(k, len(block)), dim=1)
        rows = top.indices + start
        if best_s is None:
            best_s, best_i = top.values, rows
            continue
        both_s, both_i = torch.cat([best_s, top.values], 1), torch.cat([best_i, rows], 1)
        merged = torch.topk(both_s, min(k, both_s.shape[1]), dim=1)
        best_s, best_i = merged.values, torch.gather(both_i, 1, merged.indices)
    if best_s is None:
        return np.zeros((len(queries), 0), np.int64), np.zeros((len(queries), 0), np.float32)
    return best_i.numpy(), best_s.numpy()


class DenseSearcher:
    """Encodes queries in one forward pass and searches the whole batch with one call."""

    def __init__(self, index_dir: str, encoder, cfg: FaissConfig, path: str = ""):
        """`path`: the faiss file when it is not `index_dir/faiss.index` (an imported index)."""
        faiss = _faiss()
        path = path or os.path.join(index_dir, FAISS_FILE)
        flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if cfg.mmap and not cfg.gpu else 0
        index = faiss.read_index(path, flags)
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.nprobe = cfg.ivf_nprobe
        if isinstance(index, faiss.IndexHNSW):
            index.hnsw.efSearch = cfg.hnsw_ef_search
        if flags:
            warm_page_cache(path)
        self._vectors = None  # a zero-copy torch view of a CPU Flat index's vectors
        if isinstance(index, faiss.IndexFlat) and not cfg.gpu:
            xb = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
            self._vectors = torch.from_numpy(xb)
        self.index = _to_gpu(index, cfg)
        self.encoder = encoder

    def search(self, queries: List[str], k: int) -> Tuple[np.ndarray, np.ndarray]:
        q = self.encoder.encode_queries(queries)
        if self._vectors is not None and (len(q) >= MATMUL_MIN_QUERIES or len(self._vectors) >= MATMUL_MIN_ROWS):
            v, n = self._vectors, SCORE_BLOCK_ROWS
            return topk_over_blocks(torch.from_numpy(q), ((i, v[i : i + n]) for i in range(0, len(v), n)), k)
        scores, rows = self.index.search(q, k)
        return rows, scores
