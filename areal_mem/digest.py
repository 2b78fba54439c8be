"""The sha256 of a file, read in blocks: what manifests record of the files they were built from."""

from __future__ import annotations

import hashlib


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
