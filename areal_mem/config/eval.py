"""Evaluation of a workflow on a question file."""
from dataclasses import dataclass


@dataclass
class EvalConfig:
    data: str = ""  # FlashRAG jsonl; empty: the world's test split
    method: str = "memsearcher"  # memsearcher | react | a registered workflow
    max_turns: int = 20
    concurrency: int = 16
    limit: int = 0  # 0: every question
    temperature: float = 0.0  # greedy
