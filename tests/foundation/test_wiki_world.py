"""`areal-mem world wiki` on the installed data packages: byte-identical rebuilds, splits that share
no question text, counts that add up, the answerability rule held by every kept question, and
nothing half-done when a build fails.

The packages come from `scripts/setup.sh test`; where one is absent these fail naming the
`pip install` that brings it (`WikiSourceError`), never skip.
"""

from __future__ import annotations

import json
import os

import pytest

from areal_mem.app.world.wiki import FILES, build_wiki_world
from areal_mem.retriever.corpus import parse_line
from areal_mem.rollout.rewards.metrics import normalize_answer

pytestmark = pytest.mark.integration  # each build indexes the 10,033 passages with BM25 (~5 s)

LIMIT = 200


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("wiki") / "world"
    build_wiki_world(str(out), limit=LIMIT)  # a missing package: WikiSourceError naming its pip install
    return out


def _rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_rebuild_is_byte_identical(world, tmp_path):
    again = tmp_path / "again"
    manifest = build_wiki_world(str(again), limit=LIMIT)
    names = sorted(os.listdir(world))
    assert names == sorted(os.listdir(again)) == sorted([f"{n}.jsonl" for n in FILES] + ["manifest.json"])
    for name in names:
        assert (world / name).read_bytes() == (again / name).read_bytes(), name
    assert manifest == json.loads((world / "manifest.json").read_text())


def test_counts_add_up_and_splits_share_no_text(world):
    m = json.loads((world / "manifest.json").read_text())
    assert m["kind"] == "wiki" and m["limit"] == LIMIT and m["filter"]["k"] == 5
    assert m["passages"] == 10033 and m["sources"]["questions"]["version"] == "0.19.2"
    for key, c in m["questions"].items():
        assert c["read"] == LIMIT, key
        assert c["read"] == c["bad_rows"] + c["duplicate"] + c["shared_with_test"] + c["unanswerable"] + c["kept"]
        assert 0 < c["kept"] < c["read"]  # the filter drops most: the corpus is 10k lead sections
    splits = {s: _rows(world / f"{s}.jsonl") for s in ("train", "dev", "test")}
    assert {s: len(r) for s, r in splits.items()} == {s: m["splits"][s] for s in splits}
    assert len(splits["test"]) == m["questions"]["nq.test"]["kept"] + m["questions"]["trivia.test"]["kept"]
    texts = {s: {normalize_answer(r["question"]) for r in rows} for s, rows in splits.items()}
    assert all(len(texts[s]) == len(splits[s]) for s in splits)
    assert not texts["train"] & texts["dev"] and not texts["test"] & (texts["train"] | texts["dev"])
    ids = [r["id"] for rows in splits.values() for r in rows]
    assert len(set(ids)) == len(ids)
    assert all(r["id"].split("-")[1] == "test" for r in splits["test"])
    assert all(r["id"].split("-")[1] == "dev" for r in splits["train"] + splits["dev"])
    assert {r["source"] for r in splits["test"]} == {"nq", "trivia"}


def test_kept_questions_hold_the_rule_through_the_service_index(world, tmp_path):
    """Every kept question's answer is, as whole words, in one of BM25's top 5 for it: checked
    again through `load_index` (what the retrieval service serves), not the builder's code."""
    from areal_mem.config.retriever import IndexKind, RetrieverConfig
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.index import load_index

    build_index(
        str(world / "corpus.jsonl"), str(tmp_path / "ix"), IndexKind.bm25, RetrieverConfig(), show_progress=False
    )
    index = load_index(str(tmp_path / "ix"))
    rows = _rows(world / "test.jsonl") + _rows(world / "train.jsonl")
    hits = index.search([r["question"] for r in rows], 5)
    for r, h in zip(rows, hits):
        docs = [f" {normalize_answer(doc['contents'])} " for doc, _ in h]
        assert any(f" {normalize_answer(a)} " in d for a in r["golden_answers"] for d in docs), r


def test_corpus_and_fanoutqa_rows(world):
    with open(world / "corpus.jsonl", "rb") as f:
        passages = [parse_line(line, "corpus") for line in f]
    assert [p.id for p in passages] == [str(i) for i in range(len(passages))]
    titles = [p.title for p in passages]
    assert titles == sorted(titles) and all(p.text for p in passages)
    by_id = {p.id: p for p in passages}
    multi = _rows(world / "fanoutqa.jsonl")
    subs = _rows(world / "fanoutqa_sub.jsonl")
    m = json.loads((world / "manifest.json").read_text())["fanoutqa"]
    assert (len(multi), len(subs)) == (m["questions_kept"], m["sub_questions_kept"]) and subs
    for r in multi + subs:
        assert [by_id[i].title for i in r["supporting_ids"]] == r["evidence_titles"]
        assert r["golden_answers"][0] and r["answer_parts"] and r["id"].startswith("fanoutqa-")
    assert all(r["hops"] >= len(r["evidence_titles"]) for r in multi)
    assert {r["parent"] for r in subs} <= {f"fanoutqa-{i}" for i in _fanout_ids()}


def _fanout_ids():
    from areal_mem.app.world.wiki_sources import FANOUTQA, locate

    with open(locate(FANOUTQA), encoding="utf-8") as f:
        return [e["id"] for e in json.load(f)[:LIMIT]]


def test_a_failed_build_leaves_nothing_and_a_full_folder_is_refused(world, tmp_path, monkeypatch):
    import areal_mem.app.world.wiki as wiki

    def broken(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(wiki, "fanout_rows", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        build_wiki_world(str(tmp_path / "w"), limit=20)
    assert os.listdir(tmp_path) == []  # neither the world nor its temporary folder
    with pytest.raises(ValueError, match=f"^{world} exists and is not empty"):
        build_wiki_world(str(world), limit=20)
