"""Rollout workers and the episode limits of a workflow (the workflows take `RolloutLimits` as it is)."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List


class PromptStyle(str, Enum):
    released = "released"  # the released MemSearcher text (published weights need it)
    short = "short"  # rollout/prompts/<workflow>_short.txt: a tiny model learns it quickly


class AnswerMetric(str, Enum):
    f1 = "f1"  # as released
    em = "em"


@dataclass
class RolloutLimits:
    """What ends an episode (`rollout.limits.*`); ASearcher trains with up to 128 turns, so none is a constant."""

    max_turns: int = 5
    max_new_tokens: int = 512  # per generation (action or memory)
    max_memory_tokens: int = 1024  # a longer memory ends the trajectory
    max_context_tokens: int = 4096  # prompt + response of one context


@dataclass
class RolloutConfig:
    data: str = ""  # training questions (FlashRAG jsonl or Search-R1 parquet); empty: the world's train split
    workflow: str = "memsearcher"  # registered name or module:attribute
    workflow_args: Dict[str, Any] = field(default_factory=dict)  # options of a plugin workflow
    tools: List[str] = field(default_factory=lambda: ["wikipedia_search"])  # names or module:attribute
    tool_args: Dict[str, Any] = field(default_factory=dict)  # {tool name: {option: value}}
    reward: str = "memsearcher"  # registered name or module:attribute
    reward_metric: AnswerMetric = AnswerMetric.f1  # score of a well-formatted answer
    format_score: float = 0.1  # reward of a well-formatted answer that scores 0
    prompt_style: PromptStyle = PromptStyle.released  # packaged templates of the built-in workflows
    prompt_file: str = ""  # a template file of your own; wins over prompt_style
    num_workers: int = 1
    group_size: int = 5
    max_concurrent_groups: int = 16
    # stop generating a group as soon as the learner's version makes it older than the buffer's
    # staleness bound (the buffer would drop it on arrival); off: it runs to the end, then is dropped
    cancel_stale_groups: bool = True
    # generation requests carry SGLang's `priority`, higher for groups that started earlier, so a
    # generator whose batch is full serves the groups nearest the staleness bound first (SGLang
    # needs --enable-priority-scheduling for it; the embedded generator always orders by priority)
    oldest_first: bool = False
    limits: RolloutLimits = field(default_factory=RolloutLimits)
    temperature: float = 1.0
    top_p: float = 0.99
    top_n: int = 5  # wikipedia_search default when the call gives none (the schema's; released server: 10)
    max_top_n: int = 20  # larger top_n in a call is capped
    doc_separator: str = "\n"  # between documents; "\\n" reproduces the released literal quirk
    tool_timeout_s: float = 30.0  # a slower tool call becomes an error response
    # Every generation request carries a sampling_seed derived from the run seed and its request
    # id, so an episode's tokens do not depend on which requests shared its batch or the order
    # they arrived in (off: the generator's shared random stream, as before)
    seeded_sampling: bool = True
    # Tool-call record and replay (rollout/tools/recorder.py, replayer.py). record_tools: "" or
    # "false" off; "true" <run_dir>/tools/<process>.jsonl; a folder: <folder>/<process>.jsonl;
    # a file ending .jsonl: that file (one process only)
    record_tools: str = ""
    replay_tools: List[str] = field(default_factory=list)  # tapes (files, or folders of *.jsonl) answer searches
    replay_fallback: bool = False  # a search the tapes lack goes to the retriever instead of failing
