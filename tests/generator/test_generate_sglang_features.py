"""/generate as SGLang serves it, beyond one prompt and one sample: batches, `n` samples,
server-sent-event streams, prompt log-probs (`logprob_start_len`), top-k log-probs and token
text in the triples. Every response (and every streamed chunk) is decoded with SGLang 0.5.23's
own `GenerateResponse`; log-probs equal teacher forcing within 1e-4."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import torch
from transformers import AutoTokenizer

ATOL = 1e-4


def post(url, body):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/generate", json=body) as r:
                return r.status, await r.json()

    return asyncio.run(go())


def stream(url, body):
    """The `data:` payloads of an SSE answer, in order (the last is `[DONE]`)."""

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/generate", json={**body, "stream": True}) as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
                raw = (await r.read()).decode()
        events = [e for e in raw.split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events), raw[:300]
        return [e[len("data: ") :] for e in events]

    return asyncio.run(go())


def check_logprobs(h, model, prompt, answer, temperature=1.0):
    lps = [e[0] for e in answer["meta_info"]["output_token_logprobs"]]
    ids = [e[1] for e in answer["meta_info"]["output_token_logprobs"]]
    assert ids == answer["output_ids"]
    ref = h.teacher_forced_logprobs(model, prompt, ids, temperature)
    assert torch.allclose(torch.tensor(lps), ref, atol=ATOL)


def test_a_batch_of_prompts_answers_one_response_per_prompt_in_order(server, ref_model, h, sglang_api):
    prompts = h.make_prompts(3, ref_model.config.vocab_size, seed=21)
    sp = {"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True}
    status, batch = post(
        server.url, {"input_ids": prompts, "sampling_params": sp, "return_logprob": True, "rid": ["a", "b", "c"]}
    )
    assert status == 200 and isinstance(batch, list) and len(batch) == 3
    for i, (prompt, answer) in enumerate(zip(prompts, batch)):
        sglang_api.GenerateResponse.from_json_value(answer)
        assert "index" not in answer and answer["meta_info"]["id"] == "abc"[i]  # SGLang: index in streams only
        assert answer["meta_info"]["prompt_tokens"] == len(prompt)
        _, single = post(server.url, {"input_ids": prompt, "sampling_params": sp})
        assert answer["output_ids"] == single["output_ids"]  # greedy: the batch changes nothing
        check_logprobs(h, ref_model, prompt, answer)
    # per-prompt sampling params and a batch of texts
    status, texts = post(
        server.url,
        {"text": ["The river", "A city"], "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": 4}]},
    )
    assert status == 200 and [a["meta_info"]["completion_tokens"] for a in texts] == [2, 4]


def test_n_samples_are_independent_each_with_its_own_logprobs(server, ref_model, h, sglang_api):
    prompts = h.make_prompts(2, ref_model.config.vocab_size, seed=22)
    sp = {"max_new_tokens": 12, "temperature": 1.0, "ignore_eos": True, "n": 3, "sampling_seed": 5}
    status, out = post(server.url, {"input_ids": prompts, "sampling_params": sp, "return_logprob": True})
    assert status == 200 and len(out) == 6
    assert [len(a["output_ids"]) for a in out] == [12] * 6
    for k, answer in enumerate(out):
        sglang_api.GenerateResponse.from_json_value(answer)
        prompt = prompts[k // 3]  # SGLang's order: prompt i's samples at i*n .. i*n+n-1
        assert answer["meta_info"]["prompt_tokens"] == len(prompt)
        check_logprobs(h, ref_model, prompt, answer)
    assert len({tuple(a["output_ids"]) for a in out[:3]}) == 3  # seeds 5, 6, 7: three different samples
    _, again = post(server.url, {"input_ids": prompts, "sampling_params": sp, "return_logprob": True})
    assert [a["output_ids"] for a in again] == [a["output_ids"] for a in out]  # seeded: repeatable
    status, single = post(
        server.url,
        {"input_ids": prompts[0], "sampling_params": {**sp, "n": 2}, "return_logprob": True, "logprob_start_len": 0},
    )
    assert status == 200 and isinstance(single, list) and len(single) == 2
    prompt_lps = [a["meta_info"]["input_token_logprobs"] for a in single]  # scored once, for both samples
    assert prompt_lps[0] == prompt_lps[1] and [e[1] for e in prompt_lps[0]] == prompts[0]


def test_stream_sends_cumulative_chunks_then_done(server, ref_model, h, sglang_api):
    prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=23)[0]
    sp = {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}
    events = stream(server.url, {"input_ids": prompt, "sampling_params": sp, "return_logprob": True})
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for c in chunks:
        sglang_api.GenerateResponse.from_json_value(c)
    assert [len(c["output_ids"]) for c in chunks] == list(range(1, 9))  # one chunk per token
    for a, b in zip(chunks, chunks[1:]):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"] and b["text"].startswith(a["text"])
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 8}
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    _, whole = post(server.url, {"input_ids": prompt, "sampling_params": sp})
    assert chunks[-1]["output_ids"] == whole["output_ids"] and chunks[-1]["text"] == whole["text"]
    check_logprobs(h, ref_model, prompt, chunks[-1])
    # a streamed batch: chunks carry their sequence's index; stream_interval thins them
    events = stream(server.url, {"input_ids": [prompt, prompt[:3]], "sampling_params": {**sp, "stream_interval": 4}})
    chunks = [json.loads(e) for e in events[:-1]]
    assert sorted((c["index"], len(c["output_ids"])) for c in chunks) == [(0, 4), (0, 8), (1, 4), (1, 8)]


def test_prompt_and_top_logprobs_with_token_text(server, ref_model, tiny_model_dir, h, sglang_api):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=24, lo=8, hi=9)[0]
    body = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": 5, "temperature": 0.7, "ignore_eos": True, "sampling_seed": 1},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 3,
        "return_text_in_logprobs": True,
    }
    status, out = post(server.url, body)
    assert status == 200, out
    sglang_api.GenerateResponse.from_json_value(out)
    meta = out["meta_info"]
    with torch.no_grad():
        logits = ref_model(torch.tensor([prompt + out["output_ids"]])).logits[0].float()
    logp = torch.log_softmax(logits / 0.7, dim=-1)
    # the prompt: one entry per token from logprob_start_len, the first without a log-prob
    inputs = meta["input_token_logprobs"]
    assert [e[1] for e in inputs] == prompt and inputs[0][0] is None
    ref = logp[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])]
    assert torch.allclose(torch.tensor([e[0] for e in inputs[1:]]), ref, atol=ATOL)
    assert all(e[2] == tok.decode([e[1]]) for e in inputs)
    assert meta["input_top_logprobs"][0] is None and len(meta["input_top_logprobs"]) == len(prompt)
    # top-k at every output position: the k best of the same distribution, best first, with text
    n = len(prompt)
    for pos, row in enumerate(meta["output_top_logprobs"]):
        best = logp[n - 1 + pos].topk(3)
        assert [e[1] for e in row] == best.indices.tolist()
        assert torch.allclose(torch.tensor([e[0] for e in row]), best.values, atol=ATOL)
        assert [e[2] for e in row] == [tok.decode([t]) for t in best.indices.tolist()]
    for pos, row in enumerate(meta["input_top_logprobs"][1:]):
        assert [e[1] for e in row] == logp[pos].topk(3).indices.tolist()
    assert all(e[2] == tok.decode([e[1]]) for e in meta["output_token_logprobs"])
    # from a later start: entries from there on, the first with its log-prob
    _, later = post(server.url, {**body, "logprob_start_len": 5, "top_logprobs_num": 0})
    assert [e[1] for e in later["meta_info"]["input_token_logprobs"]] == prompt[5:]
    assert abs(later["meta_info"]["input_token_logprobs"][0][0] - float(logp[4, prompt[5]])) < ATOL
    assert "output_top_logprobs" not in later["meta_info"] or later["meta_info"]["output_top_logprobs"] == []


def test_server_info_has_sglangs_fields_that_apply(server, tiny_model_dir, sglang_api):
    async def go():
        async with aiohttp.ClientSession() as s:
            out = []
            for route in ("/server_info", "/get_server_info"):
                async with s.get(server.url + route) as r:
                    assert r.status == 200
                    out.append(await r.json())
            return out

    info, old = asyncio.run(go())
    parsed = sglang_api.GetServerInfoResponse.from_json_value(info)
    assert parsed.model_path == tiny_model_dir and parsed.max_context_length > 0
    assert f"http://{parsed.host}:{parsed.port}" == server.url
    assert info["max_running_requests"] == 16 and info["tp_size"] == 1 and info["weight_version"] == "0"
    assert info["version"].startswith("areal-mem-embedded ") and "engine_stats" in info["internal_states"][0]
    assert old.keys() == info.keys()
