"""SGLang's `/weights_checker` on the embedded server: the answer decodes with SGLang's own
structs and carries, per HF tensor name, the fingerprint of the weights served; the body is
validated as SGLang's `CheckWeightsReqInput` and what the server does not implement is refused
by name."""

from __future__ import annotations

import asyncio
import hashlib

import aiohttp
import msgspec
import pytest

from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.weight_fingerprint import fingerprints
from tests.generator._sglang_source import load_io_structs, load_overall_checksum

STRUCTS = load_io_structs("ParallelismInfo", "ChecksumInfo")


def _post_all(url, bodies):
    async def go():
        out = []
        async with aiohttp.ClientSession() as s:
            for method, body in bodies:
                async with s.request(method, url + "/weights_checker", json=body) as r:
                    out.append((r.status, await r.json()))
        return out

    return asyncio.run(go())


def test_checksum_answers_the_fingerprints_of_the_served_weights_in_sglangs_shape(server, ref_model):
    (status, body), (get_status, get_body), (_, skipped) = _post_all(
        server.url,
        [
            ("POST", {"action": "checksum", "selector": "target", "extra": 1}),
            ("GET", None),  # SGLang's defaults: action checksum
            ("POST", {"skip_tensor_list": ["layers.0.", "norm"]}),
        ],
    )
    assert status == get_status == 200
    assert set(body) == {"success", "message", "ranks", "per_engine_checksum"} and body["success"] is True
    [rank] = body["ranks"]
    msgspec.convert(rank, STRUCTS["ChecksumInfo"], strict=True)  # SGLang's wire struct decodes it
    assert set(rank) == set(STRUCTS["ChecksumInfo"].__struct_fields__)
    want = fingerprints(ref_model.named_parameters())  # the server holds the initial weights
    assert rank["checksums"] == want and len(want) == len(list(ref_model.parameters()))
    assert rank["per_gpu_checksum"] == load_overall_checksum()(want)
    assert body["per_engine_checksum"] == hashlib.sha256(rank["per_gpu_checksum"].encode()).hexdigest()
    assert get_body["ranks"][0]["checksums"] == want
    assert skipped["ranks"][0]["checksums"] == {
        n: fp for n, fp in want.items() if "layers.0." not in n and "norm" not in n
    }

    async def via_client():
        async with GeneratorClient([server.url]) as c:
            return await c.weight_checksums()

    assert asyncio.run(via_client()) == {server.url: want}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"action": "compare"}, "action='compare' is not supported by the embedded generator (accepted: 'checksum')"),
        ({"action": "snapshot"}, "action='snapshot' is not supported"),
        ({"allow_quant_error": True}, "allow_quant_error=True is not supported"),
        ({"selector": "draft"}, "selector='draft' is not supported"),
        ({"selector": "drafts"}, "selector: Input should be 'target', 'draft' or 'all'"),
        ({"skip_tensor_list": "norm"}, "skip_tensor_list: Input should be a valid list"),
        ({"action": 3}, "action: Input should be a valid string"),
    ],
)
def test_refused_bodies_name_the_field(server, body, message):
    [(status, answer)] = _post_all(server.url, [("POST", body)])
    assert status == 400 and answer["success"] is False
    assert message in answer["message"], answer["message"]
