"""Bad requests get a 400 in SGLang's error shape naming the problem; the server stays up."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.generation import SamplingParams
from areal_mem.rollout.generator.client import GeneratorClient, GeneratorError
from areal_mem.rollout.generator.launch import start_embedded_generator
from areal_mem.security import InsecureBindError

CASES = [
    ({"sampling_params": {"max_new_tokens": 2}}, "exactly one of `text` and `input_ids`"),
    ({"text": "a", "input_ids": [5]}, "exactly one of `text` and `input_ids`"),
    ({"input_ids": [5], "sampling_params": {"max_tokens": 2}}, "unknown field `max_tokens`"),
    ({"input_ids": [5, 10**6]}, "input_ids[1] = 1000000 is not a token id"),
    ({"input_ids": [5, -1]}, "input_ids[1] = -1"),
    ({"input_ids": [5] * 5000}, "the prompt has 5000 tokens"),
    ({"input_ids": []}, "the prompt is empty"),
    ({"input_ids": [[5], []]}, "input_ids[1]: the prompt is empty"),
    ({"input_ids": [[5], [6]], "rid": ["a"]}, "rid: a list of 1 values for 2 prompt(s)"),
    ({"input_ids": [[5], [6]], "rid": ["a", "a"]}, "rid 'a' appears twice"),
    ({"input_ids": [[5], [6]], "sampling_params": [{"n": 2}, {}]}, "sampling_params.n must be the same"),
    ({"input_ids": [5], "sampling_params": [{"temperature": -1}]}, "sampling_params[0].temperature must be >= 0"),
    ({"input_ids": [5], "logprob_start_len": 1, "return_logprob": True}, "logprob_start_len: 1 is outside -1..0"),
    ({"input_ids": [5], "stream": "yes"}, "stream: expected a boolean"),
    ({"input_ids": [5], "lora_path": "adapter"}, "lora_path is not supported"),
    ({"input_ids": [5], "priority": "high"}, "priority: expected an integer"),
    ({"input_ids": [5], "sampling_params": {"temperature": "hot"}}, "temperature: expected a number"),
    ({"input_ids": [5], "sampling_params": {"top_p": 0}}, "top_p must be in (0, 1]"),
    ({"input_ids": [5], "sampling_params": {"n": 0}}, "sampling_params.n: 0 is outside 1..1024"),
    ({"input_ids": [5], "sampling_params": {"regex": "a+"}}, "regex is not supported"),
    ({"input_ids": [5], "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens must be >= 0"),
]


def test_bad_generate_requests_answer_400_and_server_stays_up(server, sglang_api):
    async def go():
        async with aiohttp.ClientSession() as s:
            for body, needle in CASES:
                async with s.post(server.url + "/generate", json=body) as r:
                    text = await r.text()
                    assert r.status == 400, (body, text)
                    err = sglang_api.GenerateStreamError.from_json_value(json.loads(text))
                    assert needle in err.error.message, (needle, err.error.message)
                    assert err.error.code == 400
            async with s.post(server.url + "/generate", data=b"{not json") as r:
                assert r.status == 400 and "not JSON" in await r.text()
            async with s.post(server.url + "/generat", json={"input_ids": [5]}) as r:  # aiohttp's own 404
                assert (r.status, await r.json()) == (
                    404,
                    {"error": {"message": "POST /generat: Not Found", "code": 404}},
                )
            async with s.get(server.url + "/generate") as r:
                assert r.status == 405 and r.headers["Allow"] == "POST"
                assert (await r.json())["error"]["message"] == "GET /generate: Method Not Allowed (allowed: POST)"
            async with s.post(server.url + "/pause_generation", json={"mode": "sideways"}) as r:
                assert r.status == 400
            async with s.post(server.url + "/update_weights_from_disk", json={"model_path": "/nonexistent"}) as r:
                body = await r.json()  # outside the folders it may load from
                assert r.status == 403 and body["success"] is False and "weights_dirs" in body["message"]
            async with s.post(
                server.url + "/update_weights_from_distributed",
                json={"names": ["x"], "dtypes": ["float32"], "shapes": [[1]], "group_name": "nope"},
            ) as r:
                assert r.status == 400 and "no such weight-update group" in (await r.json())["message"]
            async with s.get(server.url + "/model_info") as r:
                assert (await r.json())["weight_version"] == "0"  # nothing changed
            async with s.post(
                server.url + "/generate", json={"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 3}}
            ) as r:
                assert r.status == 200 and (await r.json())["meta_info"]["completion_tokens"] == 3

    asyncio.run(go())


def test_client_raises_4xx_without_retrying(server):
    async def go():
        async with GeneratorClient([server.url], max_retries=3) as c:
            with pytest.raises(GeneratorError, match="HTTP 400.*not a token id") as e:
                await c.generate([5, 10**6], SamplingParams(max_new_tokens=2))
            assert e.value.status == 400

    asyncio.run(go())


def test_token_is_required_when_set_and_never_optional_off_loopback(tiny_model_dir):
    with pytest.raises(InsecureBindError):
        start_embedded_generator(tiny_model_dir, host="0.0.0.0")
    h = start_embedded_generator(tiny_model_dir, EmbeddedConfig(torch_threads=1, device="cpu"), token="s3cret")
    try:

        async def go():
            async with aiohttp.ClientSession() as s:
                async with s.post(h.url + "/generate", json={"input_ids": [5]}) as r:
                    assert r.status == 401
            async with GeneratorClient([h.url], token="wrong", max_retries=0) as c:
                with pytest.raises(GeneratorError, match="401"):
                    await c.generate([5], SamplingParams(max_new_tokens=2))
            async with GeneratorClient([h.url], token="s3cret") as c:
                r = await c.generate([5, 6], SamplingParams(max_new_tokens=2))
                assert len(r.output_ids) == 2

        asyncio.run(go())
        assert "s3cret" not in h.log_tail(10**6)
    finally:
        h.stop()


def test_serve_command_refuses_bad_setups(tmp_path):
    import subprocess
    import sys

    def serve(*argv):
        return subprocess.run(
            [sys.executable, "-m", "areal_mem.app.cli", "generator", "serve", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )

    r = serve()
    assert r.returncode == 2 and "no model: pass --model PATH or set model.path" in r.stderr
    r = serve("--model", str(tmp_path), "--host", "0.0.0.0")
    assert r.returncode == 2 and "refusing to bind '0.0.0.0' without a shared token" in r.stderr
    r = serve("--model", str(tmp_path), "generator.embedded.max_batch_size=many")
    assert r.returncode == 2 and "generator.embedded.max_batch_size" in r.stderr
