"""The range of every numeric config key, declared in one table, checked when a config loads.

`RANGES` maps each numeric key of the schema (dotted; `*` for any key of a mapping) to its
`Range`: inclusive `min`/`max` (None: unbounded), `gt` for an exclusive lower bound, and `zero`:
what 0 means where 0 is allowed and special ("off", "auto", ...). `check_ranges` runs in
`load_config` after every file and override is merged and before any process starts, and names
the key, where it was set (file:line or the override) and the range. A test walks every numeric
field of the dataclasses and fails for one missing here, so a new key needs its range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

INT32 = 2**31 - 1


@dataclass(frozen=True)
class Range:
    min: Optional[float] = None
    max: Optional[float] = None
    gt: Optional[float] = None  # exclusive lower bound (a duration, a rate: 0 makes no sense)
    zero: str = ""  # what 0 means when it is allowed and special

    def accepts(self, v: float) -> bool:
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.min is not None and v < self.min:
            return False
        if self.gt is not None and v <= self.gt:
            return False
        return self.max is None or v <= self.max

    def describe(self) -> str:
        lo = f">= {self.min:g}" if self.min is not None else (f"> {self.gt:g}" if self.gt is not None else "")
        hi = f"<= {self.max:g}" if self.max is not None else ""
        text = " and ".join(p for p in (lo, hi) if p) or "finite"
        return text + (f" (0: {self.zero})" if self.zero else "")


def at_least(n: float, zero: str = "") -> Range:
    return Range(min=n, zero=zero)


POSITIVE = Range(gt=0)  # durations, rates, sizes
ONE = at_least(1)  # counts of things that must exist
SHARE = Range(min=0, max=1)
PORT = Range(min=0, max=65535, zero="pick a free port")

RANGES: Dict[str, Range] = {
    # run
    "seed": Range(min=0, max=2**32 - 1),
    # world
    "world.seed": Range(min=0, max=2**32 - 1),
    "world.passages": ONE,
    "world.questions": ONE,
    "world.dev_fraction": SHARE,
    "world.test_fraction": SHARE,
    # the world's chains (areal_mem/app/world/questions.py MIN_HOPS, MAX_HOPS)
    "world.hops": Range(min=2, max=8),
    # model
    "model.init.vocab_size": ONE,
    "model.init.hidden_size": ONE,
    "model.init.intermediate_size": ONE,
    "model.init.num_hidden_layers": ONE,
    "model.init.num_attention_heads": ONE,
    "model.init.num_key_value_heads": ONE,
    "model.init.max_position_embeddings": ONE,
    "model.init.workflow_text_repeats": at_least(0, "the released prompt once"),
    # retriever
    "retriever.encoder.max_length": ONE,
    "retriever.encoder.batch_size": ONE,
    "retriever.faiss.hnsw_m": ONE,
    "retriever.faiss.hnsw_ef_search": ONE,
    "retriever.faiss.ivf_nlist": at_least(0, "about 4 * sqrt(documents)"),
    "retriever.faiss.ivf_nprobe": ONE,
    "retriever.faiss.pq_m": at_least(0, "dimension / 8"),
    "retriever.faiss.pq_nbits": Range(min=1, max=16),
    "retriever.faiss.train_size": ONE,
    "retriever.bm25.k1": at_least(0),
    "retriever.bm25.b": SHARE,
    "retriever.chunk_size": ONE,
    "retriever.threads": at_least(0, "the library default"),
    "retriever.port": PORT,
    "retriever.replicas": ONE,
    "retriever.top_n": ONE,
    "retriever.max_top_n": ONE,
    "retriever.max_queries": ONE,
    "retriever.max_body_bytes": ONE,
    "retriever.max_query_chars": ONE,
    "retriever.http_read_timeout_s": POSITIVE,
    "retriever.max_connections": ONE,
    "retriever.http_idle_timeout_s": POSITIVE,
    "retriever.max_connections_per_client": ONE,
    "retriever.max_unsent_mb_per_client": POSITIVE,
    "retriever.batch_window_ms": at_least(0, "take what queued during the last search"),
    "retriever.max_batch_size": ONE,
    "retriever.max_batch_chars": at_least(0, "no character budget"),
    "retriever.cache_size": at_least(0, "off"),
    "retriever.cache_mb": at_least(0, "off"),
    "retriever.timeout_s": POSITIVE,
    "retriever.max_retries": at_least(0),
    "retriever.rate_limit_per_s": at_least(0, "unlimited"),
    "retriever.health_interval_s": POSITIVE,
    "retriever.health_timeout_s": POSITIVE,
    # generator
    "generator.num_servers": ONE,
    "generator.port": PORT,
    "generator.startup_timeout_s": POSITIVE,
    "generator.embedded.max_batch_size": ONE,
    "generator.embedded.max_context_len": at_least(0, "the model's max_position_embeddings"),
    "generator.embedded.torch_threads": at_least(0, "torch's default"),
    "generator.embedded.prefix_cache_tokens": at_least(0, "off"),
    "generator.embedded.weight_group_timeout_s": POSITIVE,
    "generator.embedded.weight_group_connect_timeout_s": POSITIVE,
    "generator.embedded.max_sequences_per_request": ONE,
    "generator.embedded.max_waiting_sequences": ONE,
    "generator.embedded.max_top_logprobs": at_least(0),
    "generator.embedded.max_stops": at_least(0),
    "generator.embedded.max_stop_chars": ONE,
    "generator.embedded.max_text_bytes": at_least(0, "32 bytes per token of the context"),
    "generator.embedded.stream_thinning": at_least(0, "a chunk every stream_interval tokens"),
    "generator.embedded.http_read_timeout_s": POSITIVE,
    "generator.embedded.max_connections": ONE,
    "generator.embedded.http_idle_timeout_s": POSITIVE,
    "generator.embedded.max_connections_per_client": ONE,
    "generator.embedded.max_unsent_mb_per_client": POSITIVE,
    "generator.client.timeout_s": POSITIVE,
    "generator.client.max_retries": at_least(0),
    "generator.client.cooldown_s": at_least(0),
    "generator.client.flush_retry_s": at_least(0),
    # rollout
    "rollout.format_score": Range(min=-1e6, max=1e6),
    "rollout.num_workers": ONE,
    "rollout.group_size": at_least(2),  # GRPO's baseline is the group: one trajectory learns nothing
    "rollout.max_concurrent_groups": ONE,
    "rollout.limits.max_turns": ONE,
    "rollout.limits.max_new_tokens": ONE,
    "rollout.limits.max_memory_tokens": ONE,
    "rollout.limits.max_context_tokens": ONE,
    "rollout.temperature": POSITIVE,  # log-probs are of logits / temperature
    "rollout.top_p": Range(gt=0, max=1),
    "rollout.top_n": ONE,
    "rollout.max_top_n": ONE,
    "rollout.tool_timeout_s": POSITIVE,
    # buffer
    "buffer.port": PORT,
    "buffer.max_staleness": at_least(0, "synchronous"),
    "buffer.batch_groups": ONE,
    "buffer.max_memory_groups": at_least(0, "every group read back from disk"),
    "buffer.max_group_mb": POSITIVE,
    "buffer.max_columns": at_least(11),  # the context-row columns
    "buffer.vocab_size": at_least(0, "from <model.path>/config.json, else unknown"),
    "buffer.max_version_step": ONE,
    "buffer.max_running_groups": at_least(0, "rollout.num_workers * rollout.max_concurrent_groups"),
    "buffer.slot_ttl_s": at_least(0, "never"),
    "buffer.client_retry_window_s": at_least(0),
    "retriever.max_passage_bytes": ONE,
    "buffer.conn_first_byte_s": POSITIVE,
    "buffer.conn_idle_s": Range(min=31),  # above the longest server-side wait of a call (30 s)
    "buffer.max_connections_per_address": ONE,
    # learner
    "learner.steps": at_least(0),
    "learner.lr": POSITIVE,
    "learner.weight_decay": at_least(0),
    "learner.grad_clip": at_least(0, "no clipping"),
    "learner.adam_beta1": Range(min=0, max=0.999999),
    "learner.adam_beta2": Range(min=0, max=0.999999),
    "learner.zero_stage": Range(min=0, max=3),
    "learner.micro_batch_tokens": ONE,
    "learner.mini_batches": ONE,
    "learner.shared_prefix_min_tokens": ONE,
    "learner.loss.eps_clip_low": SHARE,
    "learner.loss.eps_clip_high": at_least(0),
    "learner.loss.dual_clip": at_least(0, "off"),
    "learner.loss.behav_weight_cap": at_least(0, "off"),
    "learner.loss.entropy_coef": at_least(0),
    "learner.loss.kl_coef": at_least(0, "no reference model"),
    "learner.loss.kl_clamp": POSITIVE,
    "learner.temperature": POSITIVE,
    "learner.publish.interval": ONE,
    "learner.publish.bucket_mb": POSITIVE,
    "learner.publish.ranks_per_server": ONE,
    "learner.publish.keep_weights": ONE,
    "learner.publish.probe_tolerance": at_least(0),
    "learner.publish.heal_interval_s": POSITIVE,
    "learner.publish.restart_timeout_s": at_least(0),
    "learner.checkpoint_interval": ONE,
    "learner.keep_checkpoints": ONE,
    "learner.log_interval": ONE,
    "learner.batch_timeout_s": POSITIVE,
    "learner.sft.epochs": ONE,
    "learner.sft.batch_rows": ONE,
    "learner.sft.batch_tokens": at_least(0, "batch_rows rows a step"),
    "learner.sft.lr": POSITIVE,
    "learner.sft.warmup_steps": at_least(0),
    "learner.sft.min_lr_ratio": SHARE,
    "learner.sft.oracle_questions": at_least(0, "all"),
    "learner.sft.oracle_mistake_rate": SHARE,
    "learner.sft.threads": at_least(0, "every core"),
    "learner.lora.rank": Range(min=1, max=INT32),
    "generator.lora.max_rank": at_least(0, "learner.lora.rank"),
    "generator.lora.max_loras": ONE,
    "learner.lora.alpha": POSITIVE,
    "learner.lora.dropout": Range(min=0, max=0.99),
    # launcher
    "launcher.learner_ranks": ONE,
    "launcher.health_timeout_s": POSITIVE,
    "launcher.max_restarts": at_least(0),
    "launcher.gpus_per_generator": ONE,
    "launcher.ray_resources.*.num_cpus": at_least(-1),  # negative: what the run plan asks for
    "launcher.ray_resources.*.num_gpus": at_least(-1),
    "launcher.extension_lock_timeout_s": at_least(0),
    # eval
    "eval.max_turns": ONE,
    "eval.concurrency": ONE,
    "eval.limit": at_least(0, "every question"),
    "eval.temperature": at_least(0, "greedy"),
    "eval.interval": at_least(0, "off"),
    "eval.dev_questions": ONE,
    "eval.train_questions": at_least(0, "none"),
    "eval.priority": Range(min=-INT32 - 1, max=INT32),
    "eval.drain_timeout_s": at_least(0),
}


def _values(merged: DictConfig, key: str) -> Iterator[Tuple[str, object]]:
    """(concrete key, value) for `key`, expanding `*` over a mapping's keys."""
    head, star, tail = key.partition(".*.")
    if not star:
        yield key, OmegaConf.select(merged, key, default=None)
        return
    node = OmegaConf.select(merged, head, default=None)
    for name in map(str, node.keys()) if isinstance(node, DictConfig) else ():
        yield from _values(merged, f"{head}.{name}.{tail}")


def check_ranges(merged: DictConfig, where: Callable[[str], str]) -> None:
    """Raise ValueError(message) for the first numeric key outside its range; `where(key)` says
    where it was set."""
    for key, rng in RANGES.items():
        for concrete, value in _values(merged, key):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not rng.accepts(value):
                raise ValueError(f"{where(concrete)}: key {concrete!r} is {value!r}; allowed: {rng.describe()}")
