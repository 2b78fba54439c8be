"""The real service in a subprocess on 127.0.0.1: both API families, 4xx handling, micro-batching."""

import asyncio
import json
import os
import urllib.error
import urllib.request

import pytest

from areal_mem.retriever.launch import start_retriever

pytestmark = pytest.mark.integration  # every test reaches a service (some by request.getfixturevalue)


def post(url, body, raw=False, headers=None):
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def is_doc(d):
    return isinstance(d, dict) and set(d) == {"id", "contents"} and isinstance(d["contents"], str)


@pytest.mark.parametrize("server", ["dense_server", "bm25_server"])
def test_memsearcher_shapes(server, request, title_queries):
    url = request.getfixturevalue(server).url
    (q, pid), (q2, pid2) = title_queries[0], title_queries[1]
    status, docs = post(url + "/search", {"query": q, "top_n": 3})
    assert status == 200 and len(docs) == 3 and all(map(is_doc, docs)) and pid in [d["id"] for d in docs]
    status, out = post(url + "/search", {"query": q})  # the released server's default top_n is 10
    assert status == 200 and len(out) == 10
    status, (docs_s, scores) = post(url + "/search", {"query": q, "top_n": 4, "return_score": True})
    assert status == 200 and [d["id"] for d in docs_s] == [
        d["id"] for d in post(url + "/search", {"query": q, "top_n": 4})[1]
    ]
    assert len(scores) == 4 and all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    status, batch = post(url + "/batch_search", {"query": [q, q2], "top_n": 3})
    assert status == 200 and len(batch) == 2
    assert pid in [d["id"] for d in batch[0]] and pid2 in [d["id"] for d in batch[1]]
    assert all(len(b) == 3 and all(map(is_doc, b)) for b in batch)
    status, (bdocs, bscores) = post(url + "/batch_search", {"query": [q, q2], "top_n": 3, "return_score": True})
    assert status == 200 and bdocs == batch and [len(s) for s in bscores] == [3, 3]


@pytest.mark.parametrize("server", ["dense_server", "bm25_server"])
def test_search_r1_shapes(server, request, title_queries):
    url = request.getfixturevalue(server).url
    (q, pid), (q2, pid2) = title_queries[2], title_queries[3]
    # BM25 answers only documents holding a query word (as Lucene does): at most topk
    matching = [len(r) for r in post(url + "/retrieve", {"queries": [q, q2], "topk": 50})[1]["result"]]
    want = [min(3, n) for n in matching]
    status, out = post(url + "/retrieve", {"queries": [q, q2]})  # Search-R1's default topk is 3
    assert status == 200 and set(out) == {"result"} and [len(r) for r in out["result"]] == want
    assert all(is_doc(d) for r in out["result"] for d in r)
    assert pid in [d["id"] for d in out["result"][0]] and pid2 in [d["id"] for d in out["result"][1]]
    plain = out["result"]
    status, out = post(url + "/retrieve", {"queries": [q, q2], "topk": 3, "return_scores": True})
    assert status == 200
    for r, docs in zip(out["result"], plain):
        assert len(r) == len(docs) and all(set(h) == {"document", "score"} for h in r)
        scores = [h["score"] for h in r]
        assert [h["document"] for h in r] == docs and scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    "route,body,status,field",
    [
        ("/search", b"{not json", 400, "body"),
        ("/search", b"[1, 2]", 400, ""),
        ("/search", {"query": ""}, 400, "query"),
        ("/search", {"query": "   "}, 400, "query"),
        ("/search", {"query": 5}, 400, "query"),
        ("/search", {"top_n": 3}, 400, "query"),
        ("/search", {"query": "x", "top_n": 0}, 400, "top_n"),
        ("/search", {"query": "x", "top_n": 101}, 400, "top_n"),
        ("/search", {"query": "x", "top_n": "5"}, 400, "top_n"),
        ("/search", {"query": "x", "top_n": True}, 400, "top_n"),
        ("/search", {"query": "x", "return_score": "yes"}, 400, "return_score"),
        ("/search", {"query": "x", "topn": 3}, 400, "topn"),
        ("/batch_search", {"query": "x"}, 400, "query"),
        ("/batch_search", {"query": []}, 400, "query"),
        ("/batch_search", {"query": ["ok", ""]}, 400, "query[1]"),
        ("/retrieve", {"queries": ["ok"], "topk": 500}, 400, "topk"),
        ("/retrieve", {"queries": ["ok", 3]}, 400, "queries[1]"),
        ("/retrieve", {"query": ["ok"]}, 400, "query"),
        ("/search", json.dumps({"query": "x" * (1 << 20)}).encode(), 413, "body"),
    ],
)
def test_bad_input_gets_4xx_naming_the_field_and_the_server_stays_up(bm25_server, route, body, status, field):
    raw = isinstance(body, bytes)
    got, out = post(bm25_server.url + route, body, raw=raw)
    assert got == status and out["field"] == field and out["error"]
    assert bm25_server.health()["status"] == "ok"
    assert post(bm25_server.url + "/search", {"query": "city", "top_n": 1})[0] == 200


def test_unknown_routes_and_methods_answer_json_errors(bm25_server):
    """aiohttp's own 404 and 405 come in the service's error shape, not as text."""
    assert post(bm25_server.url + "/serach", {"query": "x"}) == (404, {"error": "POST /serach: Not Found", "field": ""})
    got, out = post(bm25_server.url + "/health", {})
    assert got == 405 and out == {"error": "POST /health: Method Not Allowed (allowed: GET,HEAD)", "field": ""}
    assert bm25_server.health()["status"] == "ok"


def test_micro_batched_answers_equal_one_at_a_time_answers(dense_server, title_queries):
    """Sequential requests run as batches of one; 48 concurrent ones share a few batches."""
    queries = [q for q, _ in title_queries[:48]]
    alone = [post(dense_server.url + "/search", {"query": q, "top_n": 5, "return_score": True})[1] for q in queries]
    before = dense_server.health()

    async def burst():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(
            *(
                loop.run_in_executor(
                    None, post, dense_server.url + "/search", {"query": q, "top_n": 5, "return_score": True}
                )
                for q in queries
            )
        )

    together = [out for _, out in asyncio.run(burst())]
    after = dense_server.health()
    assert after["queries"] - before["queries"] == 48
    assert after["batches"] - before["batches"] < 48  # some queries really were batched together
    for (docs_a, scores_a), (docs_b, scores_b) in zip(alone, together):
        assert [d["id"] for d in docs_a] == [d["id"] for d in docs_b]
        assert scores_a == pytest.approx(scores_b, abs=1e-4)


def test_recall_at_5_through_the_service(dense_server, bm25_server, title_queries):
    for handle in (dense_server, bm25_server):
        status, hits = post(handle.url + "/batch_search", {"query": [q for q, _ in title_queries], "top_n": 5})
        assert status == 200
        recall = sum(any(d["id"] == pid for d in h) for h, (_, pid) in zip(hits, title_queries)) / len(hits)
        assert recall >= 0.9, (handle.url, recall)


def test_token_is_required_when_set_and_a_public_bind_needs_one(bm25_dir):
    with start_retriever(bm25_dir, token="s3cret") as handle:
        status, out = post(handle.url + "/search", {"query": "city"})
        assert status == 401 and "token" in out["error"]
        status, out = post(
            handle.url + "/search", {"query": "city", "top_n": 1}, headers={"Authorization": "Bearer s3cret"}
        )
        assert status == 200 and len(out) == 1
    with pytest.raises(RuntimeError, match="refusing to bind '0.0.0.0' without a shared token"):
        start_retriever(bm25_dir, host="0.0.0.0")


def test_extra_corpus_fields_come_back_with_their_documents(tmp_path):
    """ASearcher-style clients read `url` (and `title`) from the documents where the corpus has them;
    a line without extra fields gives `{"id", "contents"}` as before, and no extra field can
    replace `id` or `contents`. An index built before the `extra` column serves as it did."""
    import pyarrow as pa

    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.docstore import DOCS, DocStore

    corpus = tmp_path / "corpus.jsonl"
    lines = [
        {"id": "1", "contents": '"Beimtim"\nBeimtim lies on a river.', "title": "Beimtim", "url": "https://w/Beimtim"},
        {"id": "2", "contents": '"Hokskaesia"\nHokskaesia is a country.'},
        {"id": "3", "contents": '"Zerquaen"\nZerquaen is a firm.', "url": "https://w/Z", "meta": {"rank": 3}},
    ]
    corpus.write_text("".join(json.dumps(x) + "\n" for x in lines))
    index_dir = tmp_path / "index"
    build_index(str(corpus), str(index_dir), "bm25", show_progress=False)
    with start_retriever(str(index_dir)) as handle:
        status, docs = post(handle.url + "/search", {"query": "Beimtim river Hokskaesia Zerquaen", "top_n": 3})
        assert status == 200
        by_id = {d["id"]: d for d in docs}
        assert by_id["1"] == lines[0]
        assert by_id["2"] == lines[1] and set(by_id["2"]) == {"id", "contents"}
        assert by_id["3"] == lines[2]
        status, out = post(handle.url + "/retrieve", {"queries": ["Zerquaen firm"], "topk": 1})
        assert status == 200 and "https://w/Z" in json.dumps(out)
    # the previous two-column docs.arrow
    table = pa.ipc.open_file(pa.memory_map(str(index_dir / DOCS))).read_all().select(["id", "contents"])
    with pa.OSFile(str(tmp_path / "old.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(tmp_path / "old.arrow", index_dir / DOCS)
    assert DocStore(str(index_dir)).get([0, 1]) == [{"id": x["id"], "contents": x["contents"]} for x in lines[:2]]
