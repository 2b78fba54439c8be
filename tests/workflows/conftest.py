"""Fixtures for the workflow tests: the tiny model's tokenizer, a scripted policy, a small retriever,
and the plugin registry of a fresh process."""

from __future__ import annotations

import asyncio
from importlib import metadata
from typing import Dict, List, Optional, Tuple, Union

import pytest

from areal_mem.data.task import Task
from areal_mem.generation import GenerationResult, SamplingParams
from areal_mem.rollout import registry as plugins

Reply = Union[str, Tuple[str, str]]  # text (ends with <|im_end|>) or (text, "length")


@pytest.fixture
def fresh_registry(monkeypatch) -> List[str]:
    """The plugin registry as a fresh process has it, reading entry points only from the folders a
    test appends to the list returned (none: the built-ins alone). What else is installed is not
    read, so a message that lists every plugin is the same everywhere: the example plugin installed
    as the README shows (`pip install -e examples/custom_env`), or the .egg-info it leaves in that
    folder after an uninstall (a distribution again whenever a test puts the folder on sys.path)."""
    monkeypatch.setattr(plugins, "_registry", {k: {} for k in plugins.KINDS})
    monkeypatch.setattr(plugins, "_entry_points", {k: {} for k in plugins.KINDS})
    monkeypatch.setattr(plugins, "_refused", {})
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    installed: List[str] = []

    def entry_points(group: str) -> List[metadata.EntryPoint]:
        return [ep for dist in metadata.distributions(path=installed) for ep in dist.entry_points if ep.group == group]

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    return installed


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


class ScriptedGenerator:
    """Implements the generator protocol with fixed replies; log-probs and versions are made up
    but distinct per token, so tests can check they land in the rows unchanged."""

    def __init__(self, tokenizer, replies: List[Reply], version: int = 7):
        self.tok, self.replies, self.version = tokenizer, list(replies), version
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls: List[dict] = []
        self.results: List[GenerationResult] = []
        self.forgotten: List[str] = []

    def forget(self, sticky_key: str) -> None:
        self.forgotten.append(sticky_key)

    async def generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: str | None = None, sticky_key: str | None = None
    ) -> GenerationResult:
        self.calls.append({"input_ids": list(input_ids), "sampling": sampling, "rid": rid, "sticky_key": sticky_key})
        reply = self.replies.pop(0)
        text, finish = (reply, "stop") if isinstance(reply, str) else reply
        ids = self.tok.encode(text, add_special_tokens=False)
        if finish == "stop":
            ids = ids + [self.im_end]
        ids = ids[: sampling.max_new_tokens]
        n0 = len(self.results) * 100
        result = GenerationResult(
            output_ids=ids,
            logprobs=[-(n0 + i + 1) / 1000 for i in range(len(ids))],
            versions=[self.version] * len(ids),
            finish_reason=finish,
            prompt_tokens=len(input_ids),
        )
        self.results.append(result)
        return result


class DictRetriever:
    """A retrieval backend over a few passages (title match), recording the queries it got."""

    def __init__(self, docs: Dict[str, str], fail: Optional[Exception] = None, delay_s: float = 0.0):
        self.docs, self.fail, self.delay_s = docs, fail, delay_s
        self.queries: List[Tuple[str, int]] = []

    async def search(self, query: str, top_n: int):
        self.queries.append((query, top_n))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            raise self.fail
        hits = [
            {"id": str(i), "contents": f'"{title}"\n{text}'}
            for i, (title, text) in enumerate(self.docs.items())
            if title.lower() in query.lower()
        ]
        return hits[:top_n]


@pytest.fixture
def scripted(tokenizer):
    return lambda replies, **kw: ScriptedGenerator(tokenizer, replies, **kw)


@pytest.fixture
def retriever():
    return DictRetriever(
        {
            "The Crimson Mirror": "The Crimson Mirror is a novel that appeared in 1849.",
            "Noncis Krubra": "Noncis Krubra was born in Trequek.",
        }
    )


@pytest.fixture
def task():
    return Task(id="dev_0", question="In what year did The Crimson Mirror appear?", golden_answers=["1849"])


@pytest.fixture
def make_ctx(tokenizer, retriever):
    from areal_mem.config.rollout import RolloutLimits
    from areal_mem.rollout.rewards.answer_reward import AnswerReward
    from areal_mem.rollout.tools.wikipedia_search import WikipediaSearchTool
    from areal_mem.rollout.workflows.base import WorkflowContext

    def make(generator, backend=None, prompt_template: str = "", tool_timeout_s: float = 5.0, **limits):
        tool = WikipediaSearchTool(backend or retriever, default_top_n=5, max_top_n=20)
        return WorkflowContext(
            generator=generator,
            tokenizer=tokenizer,
            tools={tool.name: tool},
            reward=AnswerReward(),
            sampling=SamplingParams(temperature=1.0, top_p=0.99),
            limits=RolloutLimits(**limits),
            prompt_template=prompt_template,
            tool_timeout_s=tool_timeout_s,
        )

    return make


@pytest.fixture(scope="session")
def retriever_url(world_dir, tmp_path_factory):
    """The real retrieval service (BM25 over the test world's corpus), shared by this folder's tests."""
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.launch import start_retriever

    index = str(tmp_path_factory.mktemp("bm25_index"))
    build_index(f"{world_dir}/corpus.jsonl", index, kind="bm25", show_progress=False)
    with start_retriever(index) as handle:
        yield handle.url
