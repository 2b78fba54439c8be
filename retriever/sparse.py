"""BM25 with bm25s: the corpus is tokenised chunk by chunk into ids, scored once, saved as arrays.

The bm25s tokenizer's vocabulary is saved next to the score matrix, so queries are mapped onto
exactly the ids the index was built with (unknown words are dropped). A document none of whose
words a query holds is not a hit, as in Lucene (Pyserini, which Search-R1's and FlashRAG's BM25
retrievers use): a query matching fewer than k documents gets fewer than k back, and one with
no known word gets none, instead of arbitrary documents of score 0.
"""

from __future__ import annotations

import os
from typing import List, Tuple

import numpy as np

from areal_mem.config.retriever import BM25Config

BM25_DIR = "bm25"


def _tokenizer(cfg: BM25Config):
    from bm25s.tokenization import Tokenizer

    return Tokenizer(stopwords=cfg.stopwords or None, stemmer=None, lower=True)


class BM25Builder:
    def __init__(self, cfg: BM25Config):
        self.cfg = cfg
        self.tokenizer = _tokenizer(cfg)
        self.ids: List[List[int]] = []

    def add(self, texts: List[str]) -> None:
        self.ids += self.tokenizer.tokenize(texts, update_vocab=True, return_as="ids", show_progress=False)

    def write(self, out_dir: str) -> dict:
        import bm25s

        if not self.ids:
            raise ValueError("cannot build an index of an empty corpus")
        model = bm25s.BM25(k1=self.cfg.k1, b=self.cfg.b, method=self.cfg.method)
        model.index((self.ids, self.tokenizer.get_vocab_dict()), show_progress=False)
        path = os.path.join(out_dir, BM25_DIR)
        model.save(path)
        self.tokenizer.save_vocab(path)
        self.tokenizer.save_stopwords(path)
        return {
            "k1": self.cfg.k1,
            "b": self.cfg.b,
            "method": self.cfg.method,
            "stopwords": self.cfg.stopwords,
            "vocab": len(self.tokenizer.get_vocab_dict()),
        }


class BM25Searcher:
    """Sums each query's postings with one vectorised `bincount`, tokenising the batch at once.

    bm25s keeps one row of precomputed scores per vocabulary id (CSR arrays, vocab x docs).
    Its `retrieve` adds a Python layer per query; here each query is one gather + `bincount`
    over a docs-sized vector that stays in cache (a batch-wide queries x docs matrix was slower:
    the cost is memory traffic over the postings, which batching cannot share). Scores equal
    bm25s's own `retrieve`.
    """

    def __init__(self, index_dir: str):
        import bm25s

        path = os.path.join(index_dir, BM25_DIR)
        model = bm25s.BM25.load(path, mmap=True, show_progress=False)  # postings stay on disk
        sc = model.scores
        self.num_docs = int(sc["num_docs"])
        self.data, self.indices, self.indptr = sc["data"], sc["indices"], np.asarray(sc["indptr"], np.int64)
        self.nonoccurrence = model.nonoccurrence_array  # bm25l / bm25+ only
        self.tokenizer = _tokenizer(BM25Config(stopwords=""))
        self.tokenizer.load_vocab(path)
        self.tokenizer.load_stopwords(path)

    def _scores(self, tokens: List[int]) -> Tuple[np.ndarray, np.ndarray]:
        """Every document's score, and whether it holds any of the query's words."""
        ids = np.asarray(tokens, dtype=np.int64)
        starts, lengths = self.indptr[ids], self.indptr[ids + 1] - self.indptr[ids]
        pos = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths - starts, lengths)
        docs = self.indices[pos]
        out = np.bincount(docs, weights=self.data[pos], minlength=self.num_docs)
        matched = np.bincount(docs, minlength=self.num_docs) > 0
        if self.nonoccurrence is not None:
            out += self.nonoccurrence[ids].sum()
        return out.astype(np.float32), matched

    def search(self, queries: List[str], k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Rows and scores [queries, k], best first; row -1 where fewer than k documents match."""
        ids = self.tokenizer.tokenize(queries, update_vocab=False, return_as="ids", show_progress=False)
        rows = np.empty((len(ids), k), np.int64)
        scores = np.empty((len(ids), k), np.float32)
        for i, tokens in enumerate(ids):
            s, matched = self._scores(tokens)
            s = np.where(matched, s, -np.inf)  # below every match, whatever the method's floor
            top = np.argpartition(-s, k - 1)[:k] if k < len(s) else np.arange(len(s))
            rows[i] = top[np.argsort(-s[top], kind="stable")]
            scores[i] = s[rows[i]]
            miss = ~matched[rows[i]]
            rows[i][miss], scores[i][miss] = -1, 0.0
        return rows, scores
