"""Scripted oracle policies for the synthetic world: demonstrations for SFT, one per workflow.

An oracle is a generator (the same protocol as the real client), so the real
workflow, tool and retriever produce the rows and the demonstrations have exactly
the format RL will see. `OraclePolicy` writes MemSearcher's, `ReActOraclePolicy`
ReAct's (`oracle_for` picks by workflow name), so two workflows compared after the
same SFT recipe start from demonstrations of the same plan. From the prompt it reads the question and
the memory; it knows each world question's supporting passages, searches their
titles in order (a chain of k hops: k searches, each for the entity the passage before
names), keeps in the memory, as `Title: sentences`, only the sentences of
each found passage that bear on the question (they name the answer, or the next
entity of the chain, or state a number for a comparison; the
whole passage when none does), so a tiny model has little to copy, and answers in `\\boxed{}` once the memory holds
them all. With `mistake_rate` it searches a wrong title, forgets the new passage,
or answers wrongly. The ReAct oracle follows the same plan, but what it has found is
every passage in its growing context (ReAct keeps no memory, so it cannot forget).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from areal_mem.data.task import Task
from areal_mem.generation import GenerationResult, SamplingParams
from areal_mem.rollout.workflows.tokens import ASSISTANT_HEADER, IM_START, decode, encode

_QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL)
_MEMORY = re.compile(r"<memory>(.*?)</memory>", re.DOTALL)
_RESPONSE = re.compile(r"<tool_response>(.*?)\n(.*?)\n</tool_response>", re.DOTALL)
_DOC_TITLE = re.compile(r'^"(.+?)"\n', re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@dataclass
class ContextView:
    """What a scripted policy reads from a context: question, memory, phase, tool responses."""

    question: str
    memory: str
    phase: str  # "action" or "memory"
    responses: List[str]  # documents text of each tool response in the last user message
    found: List[str]  # titles of the documents in every tool response of the context


def read_context(text: str) -> ContextView:
    q = _QUESTION.search(text)
    question = q.group(1).strip() if q else ""
    m = _MEMORY.search(text, q.end()) if q else None  # the user's memory, not the instruction's tags
    last_user = text.rpartition(IM_START + "user\n")[2]
    memory_phase = text.endswith(ASSISTANT_HEADER) and "<tool_response>" in last_user
    return ContextView(
        question=question,
        memory=m.group(1).strip() if m else "",
        phase="memory" if memory_phase else "action",
        responses=[r.group(2) for r in _RESPONSE.finditer(last_user)],
        # after the question: a prompt's instructions may show the tags themselves
        found=[title for title, _ in response_documents(text, q.end() if q else 0)],
    )


def response_documents(text: str, start: int = 0) -> List[Tuple[str, str]]:
    """`(title, text)` of every document in every `<tool_response>` of `text` from `start`, each
    response split on its own: a response's first line (the call, with its query) and the next
    response never run into the last document of the one before."""
    return [doc for r in _RESPONSE.finditer(text, start) for doc in split_documents(r.group(2)).items()]


def split_documents(docs_text: str) -> Dict[str, str]:
    """`{title: text}` of the `"Title"\\ntext` documents in one tool response."""
    starts = list(_DOC_TITLE.finditer(docs_text))
    out: Dict[str, str] = {}
    for i, s in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(docs_text)
        out.setdefault(s.group(1), docs_text[s.end() : end].strip())
    return out


def chain_of(task: Task) -> List[str]:
    """The entities a bridge question's hops after the first find, in order: the world's `chain`
    (more than two hops), or its `bridge` alone (two hops); empty for other questions."""
    chain = task.metadata.get("chain")
    if chain:
        return [str(c) for c in chain]
    bridge = task.metadata.get("bridge")
    return [str(bridge)] if bridge else []


def fact_sentences(text: str, task: Task, title: str = "") -> str:
    """The sentences of a passage that bear on `task`: they hold a golden answer or an entity of
    the bridge's chain (`chain_of`: the next hop's), or (comparisons) a number; the whole text
    when none does. In a chain entity's own passage (`title`) every sentence names it, so there
    only the sentences naming another entity of the chain (the next hop's) or the answer are
    kept: the memory holds one fact per hop, and fewer names that a tiny model could copy in
    place of the answer. For two hops the chain is the bridge alone, as it always was."""
    keys = [a for a in task.golden_answers if a] + [c for c in chain_of(task) if c != title]
    numbers = task.metadata.get("type") == "comparison"
    kept = [x for x in _SENTENCE_END.split(text) if any(k in x for k in keys) or (numbers and re.search(r"\d", x))]
    return " ".join(kept) or text


def search_call(query: str) -> str:
    call = {"name": "wikipedia_search", "arguments": {"query": query}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


class OraclePolicy:
    """MemSearcher's oracle. Implements `generate` like the generator client; log-probs 0.0 and
    version 0 (not sampled)."""

    workflow = "memsearcher"
    ready = "The memory holds what I need."  # the thought before the answer
    writes_memory = True  # a context ending at an assistant header after tool responses asks for the memory

    def __init__(
        self, tokenizer, tasks: List[Task], titles: Dict[str, str], mistake_rate: float = 0.0, seed: int = 0
    ) -> None:
        if not 0.0 <= mistake_rate <= 1.0:
            raise ValueError(f"mistake_rate must be in [0, 1], got {mistake_rate}")
        self.tokenizer = tokenizer
        self.tasks = {t.question: t for t in tasks}
        self.titles = titles  # passage id -> title
        self.all_titles = sorted(set(titles.values()))
        self.all_answers = sorted({t.golden_answers[0] for t in tasks})
        self.mistake_rate, self.seed = mistake_rate, seed
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def plan(self, task: Task) -> List[str]:
        return [self.titles[pid] for pid in task.metadata.get("supporting_ids", [])]

    def rng(self, rid: str) -> random.Random:
        """The draws of one request: seeded by the run seed and the request id (a str seed is
        hashed with sha512, not Python's salted hash), so which episodes ran concurrently and in
        which order their requests came does not change any episode's mistakes."""
        return random.Random(f"{self.seed}:{rid}")

    def _mistake(self, rng: random.Random) -> bool:
        return rng.random() < self.mistake_rate

    def has(self, view: ContextView, title: str) -> bool:
        """Whether the context already holds what passage `title` says: in MemSearcher, the memory."""
        return f"{title}:" in view.memory

    def action(self, view: ContextView, rng: random.Random) -> str:
        task = self.tasks.get(view.question)
        if task is None:
            raise KeyError(f"the oracle has no task for question {view.question!r}")
        missing = [t for t in self.plan(task) if not self.has(view, t)]
        if not missing:
            answer = rng.choice(self.all_answers) if self._mistake(rng) else task.golden_answers[0]
            return f" {self.ready} </think> The answer is \\boxed{{{answer}}}."
        title = rng.choice(self.all_titles) if self._mistake(rng) else missing[0]
        # The query keeps the space that precedes the title in the question and the thought:
        # byte-level BPE gives " Susvre" and "Susvre" different tokens, so with the space the
        # query is a token-for-token copy, the pattern a tiny model learns first (induction).
        return f" I need to know about {title}. </think>\n{search_call(' ' + title)}"

    def memory(self, view: ContextView, query: Optional[str], rng: random.Random) -> str:
        facts = [view.memory] if view.memory else []
        docs = {}
        for r in view.responses:
            docs.update(split_documents(r))
        query = query.strip() if query else query
        if query in docs and not self._mistake(rng):
            task = self.tasks.get(view.question)
            text = fact_sentences(docs[query], task, query) if task else docs[query]
            facts.append(f"{query}: {text}")
        elif not facts:
            facts.append("Nothing useful found yet.")
        return "<memory> " + " ".join(facts) + " </memory>"

    async def generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: str | None = None, sticky_key: str | None = None
    ) -> GenerationResult:
        text = decode(self.tokenizer, input_ids)
        view = read_context(text)
        rng = self.rng(rid or "")
        if self.writes_memory and view.phase == "memory":
            calls = re.findall(r"<tool_response>(.*?)\n", text.rpartition(IM_START + "user\n")[2])
            query = json.loads(calls[0])["arguments"].get("query") if calls else None
            out = self.memory(view, query, rng)
        else:
            out = self.action(view, rng)
        ids = encode(self.tokenizer, out) + [self.im_end]
        finish = "stop" if len(ids) <= sampling.max_new_tokens else "length"
        ids = ids[: sampling.max_new_tokens]
        return GenerationResult(
            output_ids=ids,
            logprobs=[0.0] * len(ids),
            versions=[0] * len(ids),
            finish_reason=finish,
            matched_stop=self.im_end if finish == "stop" else None,
            prompt_tokens=len(input_ids),
        )


class ReActOraclePolicy(OraclePolicy):
    """ReAct's oracle: the same plan, searches and answers as MemSearcher's; a passage counts as
    found once any tool response in the (growing) context holds it, and there is no memory to
    write, so its mistakes are a wrong search or a wrong answer."""

    workflow = "react"
    ready = "The search results hold what I need."
    writes_memory = False  # every request is an action, whatever the prompt's assistant prefix

    def has(self, view: ContextView, title: str) -> bool:
        return title in view.found


ORACLES = {cls.workflow: cls for cls in (OraclePolicy, ReActOraclePolicy)}


def oracle_for(workflow: str) -> type:
    """The oracle class that writes demonstrations for the workflow named `workflow`."""
    if workflow not in ORACLES:
        raise ValueError(
            f"no scripted oracle writes demonstrations for workflow {workflow!r} (oracles: "
            f"{', '.join(sorted(ORACLES))}); give your own SFT data (areal-mem sft --data FILE) "
            "or set learner.sft.warm_start=false"
        )
    return ORACLES[workflow]


def corpus_titles(corpus_path: str) -> Dict[str, str]:
    """Passage id -> title of a wiki-18 style corpus (`"Title"\\ntext`)."""
    titles = {}
    with open(corpus_path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            m = _DOC_TITLE.match(row["contents"])
            titles[str(row["id"])] = m.group(1) if m else row["contents"].split("\n", 1)[0]
    return titles


async def demonstrations(
    tasks: List[Task], policy: OraclePolicy, ctx, workflow, out_path: str, concurrency: int = 16, progress: bool = True
) -> Dict[str, float]:
    """Run the workflow with the oracle on every task; write all context rows as jsonl. The stats
    count the rows' context tokens (one SFT epoch), which is what the paper bench equalises
    between workflows without reading the file again."""
    import asyncio

    from tqdm import tqdm

    from areal_mem.buffer.schema import group_to_table
    from areal_mem.trajectory import Group

    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, task: Task):
        async with gate:
            return await workflow.run(task, ctx, f"oracle-{i}-{task.id}")

    jobs = [asyncio.ensure_future(one(i, t)) for i, t in enumerate(tasks)]
    with tqdm(total=len(jobs), desc="oracle demonstrations", unit="question", disable=not progress) as bar:
        for done in asyncio.as_completed(jobs):
            await done
            bar.update(1)
    rows = tokens = 0
    with open(out_path, "w", encoding="utf-8") as f:
        for task, job in zip(tasks, jobs):
            for row in group_to_table(Group(task.id, [job.result()])).to_pylist():
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                rows += 1
                tokens += len(row["input_ids"])
    trajs = [j.result() for j in jobs]
    return {
        "questions": len(trajs),
        "rows": rows,
        "tokens": tokens,
        "em": sum(t.info["em"] for t in trajs) / max(1, len(trajs)),
        "reward": sum(t.reward for t in trajs) / max(1, len(trajs)),
    }
