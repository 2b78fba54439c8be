"""Evaluation of a workflow on a question file, and of policy versions while RL trains."""

from dataclasses import dataclass
from enum import Enum


class EvalPlacement(str, Enum):
    """Where the evaluation beside training generates (`eval.placement`)."""

    own = "own"  # its own generator, loaded with each evaluated version: exactly pinned to it
    shared = "shared"  # the training generators at a lower priority: no extra device, the version moves


@dataclass
class EvalConfig:
    data: str = ""  # FlashRAG jsonl or Search-R1 parquet; empty: the world's test split
    # the workflow evaluated: memsearcher | react | a registered name | module:attribute; empty:
    # rollout.workflow, so one setting names the workflow of training and evaluation
    method: str = ""
    max_turns: int = 20  # turn limit in evaluation (training uses rollout.limits.max_turns)
    concurrency: int = 16  # episodes in flight
    limit: int = 0  # 0: every question
    temperature: float = 0.0  # greedy
    out_dir: str = ""  # empty: <run_dir>/eval/<method>
    save_responses: bool = False  # every context's response in results.jsonl, not only the final one
    # `areal-mem train` also evaluates `model.path` before the SFT warm start (tag zero_shot):
    # what a pretrained model does with the workflow untaught
    zero_shot: bool = False
    # Evaluation beside asynchronous RL: every `interval` versions (and the first and the last)
    # the learner hands the version to an evaluator process, which runs `method` greedily over a
    # fixed dev sample while training goes on and logs EM/F1 by version and wall time
    # (TensorBoard `eval_dev/*`, metrics.jsonl kind "eval_dev", <run_dir>/eval_during/curve.jsonl).
    interval: int = 0  # versions between two evaluations; 0: off
    placement: EvalPlacement = EvalPlacement.own
    dev_data: str = ""  # question file; empty: the world's dev split
    dev_questions: int = 32  # the first N questions of dev_data: the same sample for every version
    # also the first N training questions (rollout.data), logged as eval_train/*: a train curve
    # that rises while the dev curve falls is memorised entities, not search skill; 0: none
    train_questions: int = 0
    # shared placement: the priority of the evaluation's requests (SGLang's: larger is served
    # first; training requests carry none, which counts as 0 in the embedded generator and under
    # SGLang's --default-priority-value 0, or under rollout.oldest_first 2^30 minus their group's
    # start version: above this either way)
    priority: int = -1
    drain_timeout_s: float = 900.0  # after the learner ends, wait this long for the evaluations still due
