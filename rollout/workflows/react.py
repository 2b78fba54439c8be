"""The ReAct baseline (the released `ReCall` style): one growing context with the full history.

Same tools, same tool-call format and the same reward as MemSearcher, so the two
are compared on equal terms; the difference is that every tool response stays
in the context, which grows with each turn. The loop itself (`ReActLoop`) knows
nothing of question answering, so a plugin reuses it with its own prompt, tools
and `score` (examples/custom_env/); `ReActWorkflow` adds the QA scoring.
"""

from __future__ import annotations

from typing import List, Optional

from areal_mem.data.task import Task
from areal_mem.rollout.tools.calls import find_tool_calls
from areal_mem.rollout.tools.execute import execute_calls, render_tool_responses
from areal_mem.trajectory import Trajectory

from .base import Workflow, WorkflowContext, record_turn_lengths
from .memsearcher import tool_turn_text
from .qa import QAScoring
from .tokens import ContextBuilder, assistant_prefix, encode, generate_into, render_prompt


class ReActLoop(Workflow):
    """Action, tool calls (`<tool_call>{json}</tool_call>`), responses appended masked, next action
    on the same context, until the model answers without a call or a limit ends the episode;
    then `score` on the last assistant message. A subclass names its prompt (`default_prompt`, or
    `default_template`): Qwen chat markup with a `{question}` slot, ending where the assistant's
    turn opens."""

    async def run(self, task: Task, ctx: WorkflowContext, traj_id: str) -> Trajectory:
        template = self.template(ctx)
        prompt_text = render_prompt(template, question=task.question)
        prefix = assistant_prefix(prompt_text)
        builder = ContextBuilder(encode(ctx.tokenizer, prompt_text))
        lengths: List[int] = []
        message, tool_calls, end = "", 0, "turn_limit"
        for turn in range(ctx.limits.max_turns):
            step = await generate_into(ctx, builder, f"{traj_id}-{turn}", traj_id)
            if step is None:
                end = "context_limit"
                break
            result, text = step
            message = prefix + text
            lengths.append(len(builder))
            calls = find_tool_calls(text)
            ended = self._action_end(result.finish_reason, calls, turn == ctx.limits.max_turns - 1)
            if ended is not None:
                end = ended
                break
            tool_calls += len(calls)
            results = await execute_calls(calls, ctx.tools, ctx.tool_timeout_s)
            # the next assistant turn opens with the same prefix as the first (`<think>`)
            injected = encode(ctx.tokenizer, tool_turn_text(render_tool_responses(calls, results)) + prefix)
            if len(builder) + len(injected) >= ctx.limits.max_context_tokens:
                end = "context_limit"
                break
            builder.add_injected(injected)
        traj = Trajectory(traj_id=traj_id, contexts=[builder.build()])
        traj.info.update(num_turns=len(lengths), end_reason=end, tool_calls=tool_calls)
        record_turn_lengths(traj, lengths)
        return self.score(traj, task, message, ctx)

    @staticmethod
    def _action_end(finish_reason: str, calls: list, last_turn: bool) -> Optional[str]:
        if finish_reason != "stop":
            return "action_truncated"
        if not calls:
            return "answered"
        return "turn_limit" if last_turn else None


class ReActWorkflow(QAScoring, ReActLoop):
    name = "react"
    default_prompt = "react.txt"
