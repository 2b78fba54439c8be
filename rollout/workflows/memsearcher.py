"""The MemSearcher workflow as released (arXiv 2511.02805 and its released code; docs/workflows.md).

Each turn is a fresh context: system + question + the current memory, then
`<think>`. The model either answers (no tool call: the episode ends) or calls
`wikipedia_search`; the tool responses and the memory instruction are appended
masked, and the model rewrites its memory on that same context. Only the memory
is carried to the next turn, so the context length stays flat.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from areal_mem.data.task import Task
from areal_mem.rollout.tools.calls import find_tool_calls
from areal_mem.rollout.tools.execute import execute_calls, render_tool_responses
from areal_mem.trajectory import Context, Trajectory

from .base import WorkflowContext, record_turn_lengths
from .qa import QAScoring
from .tokens import (
    ASSISTANT_HEADER,
    IM_END,
    IM_START,
    ContextBuilder,
    assistant_prefix,
    encode,
    generate_into,
    render_prompt,
)

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


class MemSearcherWorkflow(QAScoring):
    name = "memsearcher"
    default_prompt = "memsearcher.txt"
    injected_texts = (MEMORY_INSTRUCTION,)

    async def run(self, task: Task, ctx: WorkflowContext, traj_id: str) -> Trajectory:
        template = self.template(ctx)
        contexts: List[Context] = []
        memory, tool_calls = "", 0
        for turn in range(ctx.limits.max_turns):
            prompt_text = render_prompt(template, question=task.question, memory=memory)
            builder = ContextBuilder(encode(ctx.tokenizer, prompt_text))
            last_turn = turn == ctx.limits.max_turns - 1
            end, message, memory, calls = await self._turn(
                ctx, builder, prompt_text, last_turn, f"{traj_id}-{turn}", traj_id
            )
            tool_calls += calls
            contexts.append(builder.build())
            if end is not None:
                break
        traj = Trajectory(traj_id=traj_id, contexts=contexts)
        traj.info.update(num_turns=len(contexts), end_reason=end, tool_calls=tool_calls)
        record_turn_lengths(traj, [len(c.input_ids) for c in contexts])
        return self.score(traj, task, message, ctx)

    async def _turn(
        self, ctx: WorkflowContext, builder: ContextBuilder, prompt_text: str, last_turn: bool, rid: str, traj_id: str
    ) -> Tuple[Optional[str], str, str, int]:
        """One context: action, then (if it searched) tools and memory.

        Returns (why the trajectory ends or None, the last assistant message, the new memory,
        the number of tool calls run).
        """
        step = await generate_into(ctx, builder, f"{rid}-action", traj_id)
        if step is None:
            return "context_limit", "", "", 0
        action, text = step
        message = assistant_prefix(prompt_text) + text
        calls = find_tool_calls(text)
        if action.finish_reason != "stop":
            return "action_truncated", message, "", 0
        if not calls:
            return "answered", message, "", 0
        if last_turn:
            return "turn_limit", message, "", 0  # a search now could never be used
        results = await execute_calls(calls, ctx.tools, ctx.tool_timeout_s)
        injected = encode(ctx.tokenizer, tool_turn_text(render_tool_responses(calls, results), MEMORY_INSTRUCTION))
        if len(builder) + len(injected) >= ctx.limits.max_context_tokens:
            return "context_limit", message, "", len(calls)
        builder.add_injected(injected)
        step = await generate_into(ctx, builder, f"{rid}-memory", traj_id)
        if step is None:
            return "context_limit", message, "", len(calls)
        result, message = step
        memory = extract_memory(message)
        if result.finish_reason != "stop":
            return "memory_truncated", message, "", len(calls)
        if memory is None:
            return "no_memory", message, "", len(calls)
        if len(encode(ctx.tokenizer, memory)) > ctx.limits.max_memory_tokens:
            return "memory_too_long", message, "", len(calls)
        return None, message, memory, len(calls)
