"""The OpenAI-compatible routes, driven by the real `openai` client against the embedded server:
models, completions and chat completions (the model's chat template), n, stop, seeds,
log-probs, streams and usage. Outputs equal what /generate gives for the same token ids, and
log-probs equal teacher forcing within 1e-4; what the server does not implement is refused
with the field's name."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest
import torch
from transformers import AutoTokenizer


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def generate(url, body):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/generate", json=body) as r:
                assert r.status == 200
                return await r.json()

    return asyncio.run(go())


def test_models_lists_the_served_model(client, server, tiny_model_dir):
    (card,) = client.models.list().data
    assert card.id == tiny_model_dir and card.object == "model"
    assert client.models.retrieve(card.id).id == card.id
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.models.retrieve("someone-else/model")


def test_completions_match_generate_with_logprobs_and_usage(client, model, server, ref_model, tiny_model_dir, h):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = "The river city of"
    out = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0, logprobs=2)
    ids = tok.encode(prompt, add_special_tokens=False)
    native = generate(server.url, {"input_ids": ids, "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
    (choice,) = out.choices
    assert choice.text == native["text"] and out.object == "text_completion"
    assert out.usage.prompt_tokens == len(ids) and out.usage.completion_tokens == len(native["output_ids"])
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    assert choice.logprobs.tokens == [tok.decode([t]) for t in native["output_ids"]]
    ref = h.teacher_forced_logprobs(ref_model, ids, native["output_ids"])
    assert torch.allclose(torch.tensor(choice.logprobs.token_logprobs), ref, atol=1e-4)
    assert all(len(row) == 2 for row in choice.logprobs.top_logprobs)
    assert choice.finish_reason in ("stop", "length")
    # n choices (seeds seed, seed+1): different samples, repeatable; a batch of prompts; stop strings
    a = client.completions.create(model=model, prompt=[prompt, "A"], max_tokens=8, n=2, seed=3)
    b = client.completions.create(model=model, prompt=[prompt, "A"], max_tokens=8, n=2, seed=3)
    assert [c.index for c in a.choices] == [0, 1, 2, 3] and [c.text for c in a.choices] == [c.text for c in b.choices]
    assert a.choices[0].text != a.choices[1].text
    stopped = client.completions.create(
        model=model, prompt=prompt, max_tokens=6, temperature=0, stop=[native["text"][2:4]]
    )
    assert stopped.choices[0].finish_reason == "stop" and native["text"][2:4] not in stopped.choices[0].text


def test_completion_stream_deltas_add_up(client, model):
    whole = client.completions.create(model=model, prompt="The river", max_tokens=8, temperature=0)
    chunks = list(
        client.completions.create(
            model=model,
            prompt="The river",
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_chat_uses_the_models_chat_template(client, model, server, tiny_model_dir, ref_model, h):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Where is Beimtim?"}]
    out = client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    native = generate(server.url, {"input_ids": ids, "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
    (choice,) = out.choices
    assert out.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.message.content == native["text"] and out.usage.prompt_tokens == len(ids)
    lps = [e.logprob for e in choice.logprobs.content]
    ref = h.teacher_forced_logprobs(ref_model, ids, native["output_ids"])
    assert torch.allclose(torch.tensor(lps), ref, atol=1e-4)
    assert all(
        len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob >= e.logprob - 1e-6 for e in choice.logprobs.content
    )
    # streamed: a role first, then content deltas that add up, one finish_reason at the end
    chunks = list(
        client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0, stream=True)
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == native["text"]
    assert [c.choices[0].finish_reason for c in chunks][-1] == choice.finish_reason
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_what_is_not_implemented_is_refused_by_name(client, model):
    with pytest.raises(openai.BadRequestError, match="presence_penalty"):
        client.completions.create(model=model, prompt="a", max_tokens=2, presence_penalty=0.5)
    with pytest.raises(openai.BadRequestError, match="echo: not supported"):
        client.completions.create(model=model, prompt="a", max_tokens=2, echo=True)
    with pytest.raises(openai.BadRequestError, match="logit_bias: not supported"):
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "a"}], max_tokens=2, logit_bias={"5": 1}
        )
    with pytest.raises(openai.BadRequestError, match="tools: not supported"):
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "a"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="a", max_tokens=2)
