"""Evaluation of a workflow on a question file."""

from dataclasses import dataclass


@dataclass
class EvalConfig:
    data: str = ""  # FlashRAG jsonl or Search-R1 parquet; empty: the world's test split
    method: str = "memsearcher"  # memsearcher | react | a registered workflow or module:attribute
    max_turns: int = 20  # turn limit in evaluation (training uses rollout.limits.max_turns)
    concurrency: int = 16  # episodes in flight
    limit: int = 0  # 0: every question
    temperature: float = 0.0  # greedy
    out_dir: str = ""  # empty: <run_dir>/eval/<method>
    save_responses: bool = False  # every context's response in results.jsonl, not only the final one
