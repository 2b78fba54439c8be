"""Generator servers: SGLang on GPUs or the embedded CPU server, and the client."""

from dataclasses import dataclass, field
from enum import Enum
from typing import List


class GeneratorBackend(str, Enum):
    embedded = "embedded"
    sglang = "sglang"


class GeneratorApi(str, Enum):
    """How clients call the generators: SGLang's native /generate (token ids, behaviour log-probs,
    weight versions, the admin routes: what training needs), or any OpenAI-compatible server's
    /v1/completions (vLLM, SGLang, the embedded server; text only: for evaluation)."""

    native = "native"
    openai = "openai"


@dataclass
class EmbeddedConfig:
    """The embedded PyTorch server (`generator.embedded.*`); SGLang takes its own flags (`sglang_args`)."""

    max_batch_size: int = 32  # most requests decoded together in one step
    device: str = "auto"  # auto: cuda when present, else cpu
    dtype: str = "float32"  # float32 | bfloat16 | float16
    max_context_len: int = 0  # 0: the model's max_position_embeddings
    torch_threads: int = 1  # CPU threads per server; 0: torch's default (all cores)
    # KV of finished sequences kept (tokens) to skip prefilling prompts that extend them (the
    # memory request extends the action's context; every context shares the system prompt);
    # emptied on every weight change, as SGLang's radix cache. 0: off
    prefix_cache_tokens: int = 0
    weight_group_timeout_s: float = 600.0  # torch.distributed broadcast timeout of a joined group
    # /init_weights_update_group: the rendezvous and group set-up must finish within this (a peer
    # that never answers is refused after it); one join at a time, a second is answered 409
    weight_group_connect_timeout_s: float = 60.0
    # folders /update_weights_from_disk may load from (symlinks and `..` resolved); empty: the
    # served model's folder, model.path and <run_dir>/weights (the disk publisher's)
    weights_dirs: List[str] = field(default_factory=list)
    # Limits a hostile or careless client meets (docs/reliability_security.md); every route
    # family (/generate, /v1/*) checks the same ones
    max_sequences_per_request: int = 1024  # prompts x n of one request
    max_waiting_sequences: int = 8192  # queued sequences of all clients; more: 503, retry later
    max_top_logprobs: int = 20  # top_logprobs_num (/generate), logprobs / top_logprobs (/v1/*)
    max_stops: int = 64  # stop strings, and stop token ids, of one request
    max_stop_chars: int = 256  # characters of one stop string
    max_text_bytes: int = 0  # UTF-8 bytes of one text prompt, checked before tokenising; 0: 32 per context token
    # streamed chunks are cumulative (SGLang's default): one is sent every max(stream_interval,
    # tokens so far / stream_thinning) tokens, so a stream's bytes grow linearly; 0: every stream_interval
    stream_thinning: int = 16
    # connections, as the retriever's (areal_mem/http_guard.py): body in and answer out within
    # http_read_timeout_s, idle connections closed after http_idle_timeout_s, slots capped in
    # all and per client address, answers not taken capped per address
    http_read_timeout_s: float = 30.0
    http_idle_timeout_s: float = 5.0
    max_connections: int = 1024
    max_connections_per_client: int = 512
    max_unsent_mb_per_client: float = 64.0


@dataclass
class GeneratorLoraConfig:
    """`generator.lora.*`: serve LoRA adapters (SGLang's `--enable-lora`, `--max-lora-rank`,
    `--lora-target-modules`, `--max-loras-per-batch`). With `learner.lora.enabled` it is on, and
    its unset rank and targets are the learner's."""

    enabled: bool = False
    max_rank: int = 0  # 0: learner.lora.rank
    target_modules: List[str] = field(default_factory=list)  # empty: learner.lora.target_modules
    max_loras: int = 4  # adapters loaded at once
    # the adapter every rollout request names (`lora_path`); with learner.lora: learner.lora.name
    adapter: str = ""


@dataclass
class GeneratorClientConfig:
    """How the rollout workers and the learner call the generators (`generator.client.*`)."""

    timeout_s: float = 300.0  # one request
    max_retries: int = 3  # resends of one request after a server failure
    cooldown_s: float = 5.0  # a failed server is skipped this long before it is tried again
    flush_retry_s: float = 0.2  # sleep between /flush_cache attempts while it answers 400


@dataclass
class GeneratorConfig:
    backend: GeneratorBackend = GeneratorBackend.embedded
    num_servers: int = 1
    host: str = "127.0.0.1"
    port: int = 0  # first port; 0: pick free ports
    urls: List[str] = field(default_factory=list)  # running servers; empty: start them
    api: GeneratorApi = GeneratorApi.native  # openai: areal-mem eval against any OpenAI-compatible server
    served_model: str = ""  # the `model` sent under api=openai; empty: the first one /v1/models lists
    token: str = ""
    startup_timeout_s: float = 180.0  # launchers wait this long for /health
    embedded: EmbeddedConfig = field(default_factory=EmbeddedConfig)
    lora: GeneratorLoraConfig = field(default_factory=GeneratorLoraConfig)
    client: GeneratorClientConfig = field(default_factory=GeneratorClientConfig)
    # sglang backend: extra `python -m sglang.launch_server` arguments
    sglang_args: List[str] = field(default_factory=list)
