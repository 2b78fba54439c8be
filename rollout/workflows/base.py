"""The `Workflow` plugin API and the small context a rollout worker hands to every episode.

A workflow runs one episode for one task and returns a `Trajectory` whose
contexts are context rows (DESIGN.md): generated tokens exactly as the
generator returned them, with their log-probs and versions; injected tokens
(tool responses, chat headers) with loss_mask 0, logp 0.0, version -1.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol

from areal_mem.data.task import Task
from areal_mem.trajectory import Trajectory
from rollout.generator.types import GenerationResult, SamplingParams
from rollout.rewards.answer import extract_boxed
from rollout.rewards.answer_reward import format_error
from rollout.rewards.metrics import exact_match, f1_score, substring_match
from rollout.tools.base import Tool

RewardFn = Callable[[str, Task], float]  # (final assistant message, task) -> reward


class Generator(Protocol):
    """What a workflow needs from the generator client (rollout/generator/client.py)."""

    async def generate(self, input_ids: List[int], sampling: SamplingParams, rid: Optional[str] = None,
                       sticky_key: Optional[str] = None) -> GenerationResult: ...


@dataclass
class Limits:
    max_turns: int = 5
    max_new_tokens: int = 512  # per generation
    max_memory_tokens: int = 1024
    max_context_tokens: int = 4096  # prompt + response of one context


@dataclass
class WorkflowContext:
    """Everything an episode may use; the worker builds one per run (see `setup.build_context`)."""

    generator: Generator
    tokenizer: Any  # a Hugging Face tokenizer of the policy
    tools: Dict[str, Tool]
    reward: RewardFn
    sampling: SamplingParams  # temperature, top_p...; the workflow sets max_new_tokens and stops
    limits: Limits = field(default_factory=Limits)
    prompt_template: str = ""  # empty: the workflow's default prompt
    tool_timeout_s: float = 30.0
    options: Dict[str, Any] = field(default_factory=dict)  # rollout.workflow_args


class Workflow(ABC):
    name: str = ""

    @abstractmethod
    async def run(self, task: Task, ctx: WorkflowContext, traj_id: str) -> Trajectory:
        """Run one episode of `task`; never raises for model mistakes, only for broken services."""


def score_trajectory(traj: Trajectory, message: str, task: Task, ctx: WorkflowContext) -> Trajectory:
    """Set the reward from the final assistant `message` and the evaluation metrics in `info`."""
    answer = extract_boxed(message)
    traj.reward = float(ctx.reward(message, task))
    golden = task.golden_answers
    traj.info.update(
        answer=answer or "",
        em=exact_match(answer, golden) if answer is not None else 0.0,
        f1=f1_score(answer, golden) if answer is not None else 0.0,
        acc=substring_match(answer, golden) if answer is not None else 0.0,
        format_error=format_error(message) or "",
        num_contexts=len(traj.contexts),
    )
    return traj
