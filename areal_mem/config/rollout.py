"""Rollout workers and the episode limits of a workflow."""
from dataclasses import dataclass


@dataclass
class RolloutConfig:
    workflow: str = "memsearcher"  # registered name or module:attribute
    reward: str = "memsearcher"  # registered name or module:attribute
    prompt_file: str = ""  # empty: the released MemSearcher prompt
    num_workers: int = 1
    group_size: int = 5
    max_concurrent_groups: int = 16
    max_turns: int = 5
    max_new_tokens: int = 512
    max_memory_tokens: int = 1024
    max_context_tokens: int = 4096
    temperature: float = 1.0
    top_p: float = 0.99
    top_n: int = 5
