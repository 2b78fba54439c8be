"""The `Workflow` plugin API and the small context a rollout worker hands to every episode.

A workflow runs one episode for one task and returns a `Trajectory` whose
contexts are context rows (docs/architecture.md, "The context row"): generated tokens exactly as the
generator returned them, with their log-probs and versions; injected tokens
(tool responses, chat headers) with loss_mask 0, logp 0.0, version -1.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

from areal_mem.config.rollout import RolloutLimits
from areal_mem.data.task import Task
from areal_mem.generation import GenerationResult, SamplingParams
from areal_mem.rollout.tools.base import EPISODE, Tool
from areal_mem.trajectory import Trajectory

from .tokens import packaged_prompt

RewardFn = Callable[[str, Task], float]  # (final assistant message, task) -> reward


class Generator(Protocol):
    """What a workflow needs from the generator client (rollout/generator/client.py)."""

    async def generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: str | None = None, sticky_key: str | None = None
    ) -> GenerationResult: ...


@dataclass
class WorkflowContext:
    """Everything an episode may use; the worker builds one per run (see `setup.build_context`)."""

    generator: Generator
    tokenizer: Any  # a Hugging Face tokenizer of the policy
    tools: Dict[str, Tool]
    reward: RewardFn
    sampling: SamplingParams  # temperature, top_p...; the workflow sets max_new_tokens and stops
    limits: RolloutLimits = field(default_factory=RolloutLimits)
    prompt_template: str = ""  # empty: the workflow's default prompt
    tool_timeout_s: float = 30.0
    options: Dict[str, Any] = field(default_factory=dict)  # rollout.workflow_args
    seed: Optional[int] = None  # set: each request's sampling_seed is derived from it and the rid


class Workflow(ABC):
    """One kind of episode. `run` plays it and ends with `score`, the hook that says what the
    episode earned: the base gives the configured reward (`rollout.reward`, `ctx.reward`);
    question answering adds its metrics in `QAScoring` (qa.py), a plugin defines its own."""

    name: str = ""
    default_prompt: str = ""  # a file in rollout/prompts/, used when the config names none
    # fixed text the workflow writes into every context besides its prompt (instructions); a
    # tiny model's tokenizer may learn them as whole words (`model.init.workflow_text_repeats`)
    injected_texts: Tuple[str, ...] = ()

    def template(self, ctx: WorkflowContext) -> str:
        """The prompt template of this episode: the configured one, else the workflow's default."""
        return ctx.prompt_template or self.default_template()

    def default_template(self) -> str:
        """The prompt when the config names none: `default_prompt` from rollout/prompts/. A plugin
        returns its own text here (the tiny model's tokenizer is trained on it too)."""
        return packaged_prompt(self.default_prompt)

    @abstractmethod
    async def run(self, task: Task, ctx: WorkflowContext, traj_id: str) -> Trajectory:
        """Run one episode of `task`, scored by `score`; never raises for model mistakes, only for
        broken services."""

    def score(self, traj: Trajectory, task: Task, message: str, ctx: WorkflowContext) -> Trajectory:
        """Set `traj.reward` (and any metrics, as flat `traj.info` scalars) from the final assistant
        `message`. Here: the configured reward alone, so a workflow that is not question answering
        is not scored as one."""
        traj.reward = float(ctx.reward(message, task))
        return traj


async def run_episode(workflow: Workflow, task: Task, ctx: WorkflowContext, traj_id: str) -> Trajectory:
    """Run one episode, then drop the generator client's server affinity for it (its `forget`),
    which would otherwise grow by one entry per trajectory for the whole run. Its tool calls see
    `traj_id` as the `EPISODE` (recorded searches name their episode)."""
    episode = EPISODE.set(traj_id)  # this task's context: concurrent episodes run in tasks of their own
    try:
        return await workflow.run(task, ctx, traj_id)
    finally:
        EPISODE.reset(episode)
        forget = getattr(ctx.generator, "forget", None)
        if forget is not None:
            forget(traj_id)


def record_turn_lengths(traj: Trajectory, lengths: List[int]) -> None:
    """Context length (tokens) at the end of each turn, as flat info columns the buffer accepts:
    `context_tokens` "n0,n1,..." and `max_context_tokens`."""
    traj.info["context_tokens"] = ",".join(str(n) for n in lengths)
    traj.info["max_context_tokens"] = max(lengths, default=0)


def turn_lengths(info: Dict[str, Any]) -> List[int]:
    text = info.get("context_tokens", "")
    return [int(n) for n in text.split(",")] if text else []


def prefill_tokens(traj: Trajectory) -> int:
    """The prompt tokens of every generation request of the episode, summed: what a generator
    without a prefix cache prefills for it. Each generated span of a context was one request,
    whose prompt was everything before the span (the workflows never generate twice in a row)."""
    total = 0
    for c in traj.contexts:
        for i, m in enumerate(c.loss_mask):
            if m and (i == 0 or not c.loss_mask[i - 1]):
                total += c.prompt_len + i
    return total


def decode_tokens(traj: Trajectory) -> int:
    """The tokens the model generated in the episode, over all its contexts: what a generator
    decodes for it (injected tool responses and headers are prefilled, not decoded)."""
    return sum(sum(c.loss_mask) for c in traj.contexts)
