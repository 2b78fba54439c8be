"""Build a workflow and its `WorkflowContext` from the rollout config (used by the worker and eval)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Dict, List, Optional

from areal_mem.config import ConfigError
from areal_mem.config.rollout import PromptStyle, RolloutConfig
from areal_mem.generation import SamplingParams
from areal_mem.rollout import registry
from areal_mem.rollout.tools.base import SearchBackend, Tool, ToolBuild

from .base import Generator, RewardFn, Workflow, WorkflowContext
from .tokens import packaged_prompt, render_prompt


def build_workflow(name: str) -> Workflow:
    factory = registry.resolve("workflow", name)
    workflow = factory()
    if not isinstance(workflow, Workflow):
        raise registry.PluginError(f"workflow {name!r} built a {type(workflow).__name__}, not a Workflow")
    return workflow


def build_tools(rollout: RolloutConfig, retriever: Optional[SearchBackend]) -> Dict[str, Tool]:
    tools: Dict[str, Tool] = {}
    for name in rollout.tools:
        args = dict(rollout.tool_args.get(name, {}) or {})
        tool = registry.resolve("tool", name)(ToolBuild(rollout=rollout, retriever=retriever, args=args))
        if not isinstance(tool, Tool):
            raise registry.PluginError(f"tool {name!r} built a {type(tool).__name__}, not a Tool")
        tools[tool.name] = tool
    return tools


def build_reward(rollout: RolloutConfig) -> RewardFn:
    return registry.resolve("reward", rollout.reward)(rollout)


def prompt_template(rollout: RolloutConfig, workflow: Workflow) -> str:
    """`rollout.prompt_file`, else the packaged template of the workflow's `prompt_style`, else ''."""
    if rollout.prompt_file:
        if not os.path.isfile(rollout.prompt_file):
            raise ConfigError(f"rollout.prompt_file {rollout.prompt_file!r} does not exist")
        with open(rollout.prompt_file, encoding="utf-8") as f:
            return f.read()
    default = getattr(workflow, "default_prompt", "")
    if not default or rollout.prompt_style == PromptStyle.released:
        return ""
    return packaged_prompt(default.replace(".txt", f"_{rollout.prompt_style.value}.txt"))


def workflow_texts(rollout: RolloutConfig) -> List[str]:
    """The fixed text of `rollout.workflow`'s contexts: its prompt with empty slots, then the
    instructions it injects (what a tiny model's tokenizer is trained on besides the world)."""
    workflow = build_workflow(rollout.workflow)
    template = prompt_template(rollout, workflow) or workflow.default_template()
    return [render_prompt(template, question="", memory=""), *workflow.injected_texts]


def build_context(
    rollout: RolloutConfig,
    workflow: Workflow,
    generator: Generator,
    tokenizer: Any,
    retriever: Optional[SearchBackend] = None,
    max_turns: Optional[int] = None,
    temperature: Optional[float] = None,
    seed: Optional[int] = None,
) -> WorkflowContext:
    """The episode context for `workflow`; `max_turns`/`temperature` override (evaluation);
    `seed` (the run seed, under `rollout.seeded_sampling`) seeds every request by its id."""
    temp = rollout.temperature if temperature is None else temperature
    return WorkflowContext(
        generator=generator,
        tokenizer=tokenizer,
        tools=build_tools(rollout, retriever),
        reward=build_reward(rollout),
        sampling=SamplingParams(temperature=temp, top_p=rollout.top_p if temp > 0 else 1.0),
        limits=replace(rollout.limits, max_turns=max_turns) if max_turns else rollout.limits,
        prompt_template=prompt_template(rollout, workflow),
        tool_timeout_s=rollout.tool_timeout_s,
        options=dict(rollout.workflow_args or {}),
        seed=seed if rollout.seeded_sampling else None,
    )
