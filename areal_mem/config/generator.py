"""Generator servers: SGLang on GPUs or the embedded CPU server, and the client."""
from dataclasses import dataclass, field
from enum import Enum
from typing import List


class GeneratorBackend(str, Enum):
    embedded = "embedded"
    sglang = "sglang"


@dataclass
class GeneratorConfig:
    backend: GeneratorBackend = GeneratorBackend.embedded
    num_servers: int = 1
    host: str = "127.0.0.1"
    port: int = 0  # first port; 0: pick free ports
    urls: List[str] = field(default_factory=list)  # running servers; empty: start them
    max_batch_size: int = 32
    request_timeout_s: float = 300.0
    max_retries: int = 3
    token: str = ""
