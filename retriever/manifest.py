"""The manifest written next to every index: what it was built from, checked when it is loaded.

A dense index answers nonsense when queried through another encoder, and document ids are
rows of the corpus it was built from; both mismatches are refused with a message saying which.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Optional

MANIFEST = "manifest.json"
FORMAT_VERSION = 1

# Encoder settings that change the vectors; a mismatch in any of them is refused.
ENCODER_KEYS = ("fingerprint", "dim", "pooling", "normalize", "query_prefix", "passage_prefix", "max_length")
# Where and how fast it was built, not what it answers: left out of the checksum.
NOT_IDENTITY = ("corpus_path", "build_seconds")
# In an import record: where the files sit and how the import went, not what they hold.
IMPORT_NOT_IDENTITY = ("source", "file", "linked", "check", "offsets", "mtime_ns")


class IndexMismatchError(ValueError):
    """The index on disk does not belong with the corpus or encoder it is used with."""


@dataclass
class Manifest:
    kind: str  # dense | bm25
    count: int  # documents
    corpus_path: str
    corpus_checksum: str  # sha256 of the decompressed corpus bytes
    split_title: bool
    dim: int = 0  # dense only
    encoder: dict = field(default_factory=dict)  # dense only: Encoder.identity()
    index: dict = field(default_factory=dict)  # faiss or bm25 settings
    build_seconds: float = 0.0
    format_version: int = FORMAT_VERSION
    docstore: str = "arrow"  # arrow: docs.arrow in the folder | offsets: offsets.u64 into the corpus file
    imported: dict = field(default_factory=dict)  # `retriever import`: the index and corpus files it uses

    def checksum(self) -> str:
        """sha256 of what the index answers from: corpus checksum and count, kind, encoder
        (weights fingerprint and settings, not its folder), index settings. The /health answer
        carries it, so a recorded tool call names the index that answered it. Hashing the index
        files themselves would take minutes at wiki-18 size (tens of GB) on every start."""
        identity = {k: v for k, v in asdict(self).items() if k not in NOT_IDENTITY}
        identity["encoder"] = {k: v for k, v in self.encoder.items() if k != "path"}
        if self.docstore == "arrow":  # built indexes keep the checksum they had before imports existed
            identity.pop("docstore")
        if not self.imported:
            identity.pop("imported")
        else:
            identity["imported"] = {
                part: {k: v for k, v in rec.items() if k not in IMPORT_NOT_IDENTITY} if isinstance(rec, dict) else rec
                for part, rec in self.imported.items()
                if part not in IMPORT_NOT_IDENTITY
            }
        return "sha256:" + hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def save(self, out_dir: str) -> None:
        tmp = os.path.join(out_dir, MANIFEST + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, indent=2, sort_keys=True)
        os.replace(tmp, os.path.join(out_dir, MANIFEST))

    @classmethod
    def load(cls, index_dir: str) -> Manifest:
        path = os.path.join(index_dir, MANIFEST)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{index_dir}: no {MANIFEST}; build the index with `areal-mem retriever build` (or `areal-mem retriever import` one built elsewhere)"
            )
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        if raw.get("format_version") != FORMAT_VERSION:
            raise IndexMismatchError(
                f"{path}: index format {raw.get('format_version')!r}, this code reads {FORMAT_VERSION}; rebuild it"
            )
        try:
            return cls(**raw)
        except TypeError as e:
            raise IndexMismatchError(f"{path}: malformed manifest ({e})") from None

    def check_corpus(self, checksum: str, count: int, corpus_path: str) -> None:
        if checksum != self.corpus_checksum or count != self.count:
            raise IndexMismatchError(
                f"corpus mismatch: the index was built from {self.corpus_path} ({self.count} passages, "
                f"{self.corpus_checksum}), but {corpus_path} has {count} passages, {checksum}"
            )

    def check_encoder(self, identity: dict, where: Optional[str] = None) -> None:
        for key in ENCODER_KEYS:
            built, now = self.encoder.get(key), identity.get(key)
            if built != now:
                raise IndexMismatchError(
                    f"encoder mismatch on {key!r}: the index was built with {built!r} "
                    f"(encoder {self.encoder.get('path')}), the query encoder has {now!r} "
                    f"(encoder {identity.get('path')}){'; ' + where if where else ''}"
                )
