"""The plugin API: everything an environment of your own imports, in one module.

Import from here, not from the modules behind it, which may move::

    from areal_mem.api import ReActLoop, Tool, ToolBuild, ToolError, rewards

What each is for:

- `Workflow`: one kind of episode. Subclass it, set `name`, implement
  `async run(task, ctx, traj_id) -> Trajectory`, and end `run` with
  `self.score(traj, task, message, ctx)`, the scoring hook: by default the configured reward
  (`rollout.reward`) on the final assistant message; override it to score your own way.
  `default_template()` returns the prompt used when the config names none.
- `ReActLoop`: a ready `Workflow` with the ReAct episode (one growing context, tool calls in
  `<tool_call>{json}</tool_call>`, responses appended masked); give it a prompt
  (`default_template`) and, if the configured reward is not enough, a `score`.
- `QAScoring`: mix in before the loop (`class W(QAScoring, ReActLoop)`) to score as
  MemSearcher and ReAct do: the `\\boxed{}` answer's EM, F1, accuracy and format check in
  `Trajectory.info`, which `areal-mem eval` summarises.
- `WorkflowContext`: what an episode gets: generator, tokenizer, tools by name, the
  configured reward, sampling, limits, prompt template, `rollout.workflow_args` as `options`.
- `Tool`, `ToolBuild`, `ToolError`: a tool has a `name`, a JSON `schema` and
  `async call(arguments) -> str`; it raises `ToolError` to refuse a call (the message becomes
  the tool response). A tool factory takes a `ToolBuild` (rollout config, retriever, the tool's
  `rollout.tool_args`) and returns the tool.
- `Task`, `Trajectory`, `Context`: a question with its golden answers; an episode's result,
  one `Context` row per context (prompt and response tokens, loss mask, log-probs, versions),
  its `reward` and flat `info` scalars.
- `register(kind, name, obj)`: register a workflow class, tool factory or reward factory
  (`factory(rollout_config) -> reward(message, task) -> float`) by name in code.
- `rewards`: answer helpers (`extract_boxed`, `normalize_answer`, `exact_match`, `f1_score`,
  `substring_match`, `format_error`, `AnswerReward`); the first four are also here by name.

A config names each part by registered name or `module:attribute` path (`rollout.workflow`,
`rollout.tools`, `rollout.reward`). An installed package registers them through one
entry-point group per kind: `areal_mem.workflows`, `areal_mem.tools`, `areal_mem.rewards`
(examples/custom_env/pyproject.toml). `eval.method` left empty evaluates `rollout.workflow`.
"""

from areal_mem.data.task import Task
from areal_mem.rollout import rewards
from areal_mem.rollout.registry import register
from areal_mem.rollout.rewards import exact_match, extract_boxed, f1_score, normalize_answer
from areal_mem.rollout.tools.base import Tool, ToolBuild, ToolError
from areal_mem.rollout.workflows.base import Workflow, WorkflowContext
from areal_mem.rollout.workflows.qa import QAScoring
from areal_mem.rollout.workflows.react import ReActLoop
from areal_mem.trajectory import Context, Trajectory

__all__ = [
    "Context",
    "QAScoring",
    "ReActLoop",
    "Task",
    "Tool",
    "ToolBuild",
    "ToolError",
    "Trajectory",
    "Workflow",
    "WorkflowContext",
    "exact_match",
    "extract_boxed",
    "f1_score",
    "normalize_answer",
    "register",
    "rewards",
]
