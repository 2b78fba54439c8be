"""The Arrow Flight replay buffer and its staleness bound."""
from dataclasses import dataclass


@dataclass
class BufferConfig:
    host: str = "127.0.0.1"
    port: int = 0
    url: str = ""  # a running buffer; empty: start one
    max_staleness: int = 2  # eta; 0 runs synchronously
    batch_groups: int = 8  # B: groups per training batch
    max_memory_groups: int = 256  # groups held in memory, the rest read back from disk
    token: str = ""
