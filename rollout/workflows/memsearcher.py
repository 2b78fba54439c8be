"""The MemSearcher workflow as released (REFERENCE.md section 1).

Each turn is a fresh context: system + question + the current memory, then
`<think>`. The model either answers (no tool call: the episode ends) or calls
`wikipedia_search`; the tool responses and the memory instruction are appended
masked, and the model rewrites its memory on that same context. Only the memory
is carried to the next turn, so the context length stays flat.
"""
from __future__ import annotations

import re
from typing import List, Optional

from areal_mem.data.task import Task
from areal_mem.trajectory import Context, Trajectory
from rollout.tools.calls import find_tool_calls
from rollout.tools.execute import execute_calls, render_tool_responses

from .base import Workflow, WorkflowContext, score_trajectory
from .tokens import (ASSISTANT_HEADER, IM_END, IM_START, ContextBuilder, assistant_prefix, encode,
                     generate_into, load_prompt, render_prompt)

MEMORY_INSTRUCTION = (
    "Please read the tool response carefully and update the memory with new information that helps "
    "to answer the question, while retaining all relevant details from the previous memory. Return "
    "the updated memory within <memory> </memory> tags."
)
_MEMORY = re.compile(r"<memory>(.*?)</memory>", re.DOTALL)


def extract_memory(text: str) -> Optional[str]:
    """The first `<memory>...</memory>` block, stripped; None when missing or empty."""
    m = _MEMORY.search(text)
    return (m.group(1).strip() or None) if m else None


def tool_turn_text(responses: str, instruction: str = "") -> str:
    """The masked span after an action with tool calls, up to the next assistant header."""
    return f"\n{IM_START}user\n{responses}{instruction}{IM_END}\n{ASSISTANT_HEADER}"


class MemSearcherWorkflow(Workflow):
    name = "memsearcher"
    default_prompt = "memsearcher.txt"

    async def run(self, task: Task, ctx: WorkflowContext, traj_id: str) -> Trajectory:
        template = ctx.prompt_template or load_prompt("", self.default_prompt)
        contexts: List[Context] = []
        memory, message, end = "", "", "turn_limit"
        tool_calls = 0
        for turn in range(ctx.limits.max_turns):
            prompt_text = render_prompt(template, question=task.question, memory=memory)
            builder = ContextBuilder(encode(ctx.tokenizer, prompt_text))
            step = await generate_into(ctx, builder, f"{traj_id}-{turn}-action", traj_id)
            if step is None:
                end = "context_limit"
                break
            action, text = step
            message = assistant_prefix(prompt_text) + text
            calls = find_tool_calls(text)
            if action.finish_reason != "stop":
                end = "action_truncated"
            elif not calls:
                end = "answered"
            elif turn == ctx.limits.max_turns - 1:
                end = "turn_limit"  # a search on the last allowed turn could never be used
            else:
                tool_calls += len(calls)
                results = await execute_calls(calls, ctx.tools, ctx.tool_timeout_s)
                injected = encode(ctx.tokenizer, tool_turn_text(render_tool_responses(calls, results),
                                                                 MEMORY_INSTRUCTION))
                if len(builder) + len(injected) >= ctx.limits.max_context_tokens:
                    end = "context_limit"
                else:
                    builder.add_injected(injected)
                    step = await generate_into(ctx, builder, f"{traj_id}-{turn}-memory", traj_id)
                    end = self._memory_end(ctx, step)
                    if step is not None:
                        message = step[1]
                        new_memory = extract_memory(step[1])
                    if end is None:
                        contexts.append(builder.build())
                        memory = new_memory or ""
                        continue
            contexts.append(builder.build())
            break
        traj = Trajectory(traj_id=traj_id, contexts=contexts)
        traj.info.update(num_turns=len(contexts), end_reason=end, tool_calls=tool_calls,
                         context_tokens=[len(c.input_ids) for c in contexts])
        return score_trajectory(traj, message, task, ctx)

    @staticmethod
    def _memory_end(ctx: WorkflowContext, step) -> Optional[str]:
        """Why the memory generation ends the trajectory, or None to go on."""
        if step is None:
            return "context_limit"
        result, text = step
        if result.finish_reason != "stop":
            return "memory_truncated"
        memory = extract_memory(text)
        if memory is None:
            return "no_memory"
        if len(encode(ctx.tokenizer, memory)) > ctx.limits.max_memory_tokens:
            return "memory_too_long"
        return None
