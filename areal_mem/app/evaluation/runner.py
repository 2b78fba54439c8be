"""Run one workflow over a question list with bounded concurrency and write per-question results."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from typing import Any, Dict, List, Tuple

from tqdm import tqdm

from areal_mem.data.task import Task
from areal_mem.generation import GeneratorError
from areal_mem.rollout.oracle import response_documents
from areal_mem.rollout.rewards.metrics import normalize_answer, substring_match
from areal_mem.rollout.tools.base import ToolUnavailable
from areal_mem.rollout.workflows.base import (
    Workflow,
    WorkflowContext,
    decode_tokens,
    prefill_tokens,
    run_episode,
    turn_lengths,
)
from areal_mem.trajectory import Trajectory

# copied from `Trajectory.info` where the workflow recorded them: the episode's shape (every
# built-in loop), the answer metrics (`QAScoring`'s; not a calculator's, say)
RECORD_KEYS = ("answer", "em", "f1", "acc", "num_turns", "tool_calls", "end_reason", "format_error")


class EvalStopped(RuntimeError):
    """The evaluation cannot go on as configured (a generator gave up, a replay lacks a call);
    the questions answered before are kept in the file `partial_path` names."""


def partial_path(out_path: str) -> str:
    """Where a stopped evaluation keeps what it answered: beside `results.jsonl`, never in it (a
    results file is a whole evaluation, which its summary describes)."""
    return os.path.splitext(out_path)[0] + ".partial.jsonl"


def _write(path: str, records: List[Dict[str, Any]]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def search_provenance(traj: Trajectory, task: Task, decode) -> Dict[str, bool]:
    """Where an answer came from: did a search return a golden answer (`golden_in_search`), and
    does the predicted answer occur in what the searches returned (`answer_in_search`: copied
    from a passage, where an answer given without one was recalled or guessed). A bridge question
    (`metadata["bridge"]`: the entity its first hop finds) also records `first_hop_in_search`: a
    search returned a passage that names the bridge entity other than the bridge's own passage
    (which is the second hop's), i.e. the link the first hop is for; with `golden_in_search` and
    EM it says at which link a two-hop chain broke. The searches' text is what the workflow
    injected into the responses (loss mask 0: tool responses and the headers around them)."""
    injected = " ".join(
        decode([t for t, m in zip(c.input_ids[c.prompt_len :], c.loss_mask) if not m]) for c in traj.contexts
    )
    answer = normalize_answer(str(traj.info.get("answer") or ""))
    found: Dict[str, Any] = {
        "golden_in_search": bool(substring_match(injected, task.golden_answers)),
        "answer_in_search": bool(answer) and answer in normalize_answer(injected),
    }
    bridge = str(task.metadata.get("bridge") or "")
    if bridge:
        docs = response_documents(injected)
        found["first_hop_in_search"] = any(bridge in text for title, text in docs if title != bridge)
        chain = task.metadata.get("chain")
        if not isinstance(chain, list) or not chain:  # a 2-hop world's questions name only the bridge
            chain = [bridge]
        found["hops_found"] = hops_found(
            docs, [str(e) for e in chain], task.golden_answers, found["first_hop_in_search"]
        )
    return found


def hops_found(docs: List[Tuple[str, str]], chain: List[str], golden: List[str], first_hop: bool) -> int:
    """How many hops of a bridge chain the searches returned, in order from the first (0 to
    len(chain) + 1): the first hop, a passage naming the chain's first entity (`first_hop`); hop
    i + 1, the passage of entity i (its title) naming entity i + 1, the last one naming the
    answer. A homonym's passage has the title but not the link. Where a k-hop chain broke."""
    links = [first_hop]
    links += [any(title == a and b in text for title, text in docs) for a, b in zip(chain, chain[1:])]
    links.append(any(title == chain[-1] and substring_match(text, golden) for title, text in docs))
    return next((i for i, ok in enumerate(links) if not ok), len(links))


async def evaluate(
    tasks: List[Task],
    workflow: Workflow,
    ctx: WorkflowContext,
    concurrency: int,
    out_path: str,
    progress: bool = True,
    save_responses: bool = False,
) -> List[Dict[str, Any]]:
    """One greedy episode per task; results are written to `out_path` (jsonl) in task order.

    save_responses: every context's response text in `responses` (turn order), to see where
    episodes go wrong; by default only the final one."""
    if concurrency < 1:
        raise ValueError(f"eval.concurrency must be at least 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, task: Task) -> Dict[str, Any]:
        async with gate:
            traj = await run_episode(workflow, task, ctx, f"eval-{i}-{task.id}")
        responses = [
            ctx.tokenizer.decode(c.input_ids[c.prompt_len :], skip_special_tokens=False) for c in traj.contexts
        ]
        record = {
            "id": task.id,
            "question": task.question,
            "golden_answers": task.golden_answers,
            "reward": traj.reward,
            **{k: traj.info[k] for k in RECORD_KEYS if k in traj.info},
            "context_tokens": turn_lengths(traj.info),
            "prefill_tokens": prefill_tokens(traj),
            "decode_tokens": decode_tokens(traj),
            **search_provenance(traj, task, lambda ids: ctx.tokenizer.decode(ids, skip_special_tokens=False)),
            # which policy versions sampled its model tokens (evaluation beside training)
            "token_versions": dict(
                Counter(v for c in traj.contexts for v, m in zip(c.versions, c.loss_mask) if m and v >= 0)
            ),
            "final_response": responses[-1] if responses else "",
        }
        if task.metadata.get("type"):  # multi-hop data: single | bridge | comparison (the world's)
            record["type"] = str(task.metadata["type"])
        if save_responses:
            record["responses"] = responses
        return record

    jobs = [asyncio.ensure_future(one(i, t)) for i, t in enumerate(tasks)]
    partial = partial_path(out_path)
    try:
        with tqdm(total=len(jobs), desc=f"eval {workflow.name}", unit="question", disable=not progress) as bar:
            for done in asyncio.as_completed(jobs):
                await done
                bar.update(1)
    except BaseException as e:
        for j in jobs:
            j.cancel()
        if not isinstance(e, (GeneratorError, ToolUnavailable)):
            raise
        answered = [j.result() for j in jobs if j.done() and not j.cancelled() and j.exception() is None]
        _write(partial, answered)
        raise EvalStopped(
            f"stopped after {len(answered)} of {len(jobs)} questions: {type(e).__name__}: {e}; the answered ones "
            f"are in {partial} (no results.jsonl or summary: they describe a whole evaluation)"
        ) from e
    records = [j.result() for j in jobs]
    _write(out_path, records)
    if os.path.exists(partial):  # an earlier stopped attempt's: this one is whole
        os.remove(partial)
    return records
