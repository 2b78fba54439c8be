"""Shared pieces of the fault tests: the tiny debug recipe with faults-first settings, and a
workflow plugin whose policy searches on every episode (an untrained tiny model never emits a
well-formed tool call, so without it a retriever fault would touch no episode)."""

from __future__ import annotations

import json
import logging
import os

import psutil

from areal_mem.config import load_run
from areal_mem.rollout.tools.calls import find_tool_calls
from areal_mem.rollout.tools.execute import execute_calls, render_tool_responses
from areal_mem.rollout.workflows.memsearcher import MEMORY_INSTRUCTION, MemSearcherWorkflow, tool_turn_text
from areal_mem.rollout.workflows.tokens import assistant_prefix, encode, generate_into
from tests.launch.conftest import REPO, TINY

log = logging.getLogger(__name__)
GROUP_SIZE = 2  # TINY's rollout.group_size
FAULTS_FIRST = ["launcher.max_restarts=5", "learner.checkpoint_interval=2", "learner.publish.probe_check=true"]


def fault_cfg(run_dir, *overrides):
    """configs/debug_cpu.yaml at the TINY size of the launcher tests, in `run_dir`."""
    return load_run(
        [os.path.join(REPO, "configs", "debug_cpu.yaml")], [f"run_dir={run_dir}", *TINY, *FAULTS_FIRST, *overrides]
    )


def run_dir_processes(run_dir):
    return [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]


class SearchingWorkflow(MemSearcherWorkflow):
    """One MemSearcher turn whose policy always searches for the question: the model writes the
    action, then a `wikipedia_search` call is run and its response injected (masked) before the
    model writes its memory. Error responses are logged to the worker's log."""

    async def _turn(self, ctx, builder, prompt_text, last_turn, rid, traj_id):
        step = await generate_into(ctx, builder, f"{rid}-action", traj_id)
        if step is None:
            return "context_limit", "", "", 0
        message = assistant_prefix(prompt_text) + step[1]
        query = json.dumps(prompt_text.strip()[-80:])  # BM25: the end of the prompt holds the question
        calls = find_tool_calls(
            f'<tool_call>{{"name": "wikipedia_search", "arguments": {{"query": {query}}}}}</tool_call>'
        )
        results = await execute_calls(calls, ctx.tools, ctx.tool_timeout_s)
        for r in results:
            if r.startswith("Error"):
                log.warning("tool response error: %s", r)
        builder.add_injected(
            encode(ctx.tokenizer, tool_turn_text(render_tool_responses(calls, results), MEMORY_INSTRUCTION))
        )
        step = await generate_into(ctx, builder, f"{rid}-memory", traj_id)
        return "answered", message if step is None else step[1], "", len(calls)
