"""Hostile clients against the real embedded generator (`areal-mem generator serve` on 127.0.0.1):
each probe finding's request is refused (or its cost bounded) while other clients' requests,
sent at the same time, get their exact answers, and the server keeps serving.

Findings (docs/reliability_security.md): 1 temperature ~0 gave NaN log-probs; 2 OpenAI
`stop_token_ids` outside the vocabulary failed every request in the engine step; 4 no cap on
prompts x n, and quadratic aborts; 6 tokenising unbounded text on the loop, top_logprobs_num up
to the vocabulary, unbounded stop lists, quadratic stream bytes; 9 weights files outside the
allowed folders, non-finite weights, huge safetensors headers; 10 lone surrogates; 15 slime's
default sampling parameters. Weight-group joins (5) and slow connections (7): own servers below.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

GOOD = {"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}}


def _others(svc, n: int = 3):
    """Start `n` other clients' /generate requests; returns a function giving their answers."""
    pool = ThreadPoolExecutor(n)
    futs = [pool.submit(svc.call, "POST", "/generate", GOOD) for _ in range(n)]

    def results():
        out = [f.result(timeout=120) for f in futs]
        pool.shutdown()
        return out

    return results


def _model(svc) -> str:
    return os.path.basename(svc.call("GET", "/v1/models")[1]["data"][0]["id"])


def _assert_others_fine(results, reference=None):
    for status, out in results():
        assert status == 200, out
        assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 24}, out
        if reference is not None:
            assert out["output_ids"] == reference


@pytest.fixture(scope="module")
def reference(generator_service):
    status, out = generator_service.call("POST", "/generate", GOOD)
    assert status == 200
    return out["output_ids"]


# ---- 2: the same checks on every route family ------------------------------------------------
@pytest.mark.parametrize("bad", [10**9, 2**70, -1])
def test_openai_stop_token_ids_outside_the_vocabulary_fail_only_their_request(
    generator_service, reference, checks, bad
):
    svc = generator_service
    results = _others(svc)
    extra = {"min_tokens": 1, "stop_token_ids": [bad], "max_tokens": 4}
    model = _model(svc)
    for path, body in [
        ("/v1/completions", {"model": model, "prompt": [5, 6], **extra}),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}),
        ("/generate", {"input_ids": [5, 6], "sampling_params": {"min_new_tokens": 1, "stop_token_ids": [bad]}}),
    ]:
        status, out = svc.call("POST", path, body)
        assert status == 400 and "stop_token_ids" in out["error"]["message"], (path, out)
    _assert_others_fine(results, reference)
    checks["generator"](svc)


def test_openai_and_generate_refuse_the_same_sampling_values(generator_service, checks):
    svc = generator_service
    model = _model(svc)
    cases = [
        ({"stop": ["x"] * 65}, {"stop": ["x"] * 65}, "stop"),
        ({"stop": ["x" * 300]}, {"stop": ["x" * 300]}, "stop"),
        ({"stop_token_ids": [5] * 65}, {"stop_token_ids": [5] * 65}, "stop_token_ids"),
        ({"top_k": 0}, {"top_k": 0}, "top_k"),
    ]
    for gen_sp, oa, field in cases:
        status, out = svc.call("POST", "/generate", {"input_ids": [5], "sampling_params": gen_sp})
        assert status == 400 and field in out["error"]["message"], (gen_sp, out)
        status, out = svc.call("POST", "/v1/completions", {"model": model, "prompt": [5], "max_tokens": 1, **oa})
        assert status == 400 and field in out["error"]["message"], (oa, out)
    checks["generator"](svc)


# ---- 1: temperature ~0 is greedy; JSON never holds NaN ----------------------------------------
def test_a_tiny_temperature_is_greedy_with_finite_logprobs(generator_service, checks):
    svc = generator_service
    body = {"input_ids": [5, 6, 7, 8], "return_logprob": True, "top_logprobs_num": 3}
    answers = {}
    for t in (0, 1e-40, 1e-300, 5e-7):
        sp = {"max_new_tokens": 6, "temperature": t, "ignore_eos": True}
        status, raw, _ = checks["http_call"](
            svc.url,
            "POST",
            "/generate",
            json.dumps({**body, "sampling_params": sp}).encode(),
            {"Authorization": f"Bearer {svc.token}"},
        )
        assert status == 200 and b"NaN" not in raw and b"Infinity" not in raw, raw[:300]
        out = json.loads(raw)
        lps = [e[0] for e in out["meta_info"]["output_token_logprobs"]]
        assert all(isinstance(x, float) and x == x and x <= 0 for x in lps), lps
        answers[t] = (out["output_ids"], lps)
    assert answers[1e-40] == answers[0] == answers[1e-300] == answers[5e-7]  # SGLang: < 1e-6 is greedy
    model = _model(svc)
    status, out = svc.call(
        "POST",
        "/v1/completions",
        {
            "model": model,
            "prompt": [5, 6, 7, 8],
            "max_tokens": 6,
            "temperature": 1e-40,
            "logprobs": 2,
            "ignore_eos": True,
        },
    )
    assert status == 200 and out["choices"][0]["logprobs"]["token_logprobs"] == answers[0][1]
    checks["generator"](svc)


def test_answers_write_non_finite_floats_as_null():
    from areal_mem.rollout.generator.embedded.protocol import dumps

    assert json.loads(dumps({"a": [float("nan"), float("-inf"), 1.5]})) == {"a": [None, None, 1.5]}
    assert dumps({"a": [1.0]}) == json.dumps({"a": [1.0]})


# ---- 10: lone surrogates ----------------------------------------------------------------------
def test_lone_surrogates_are_a_json_400_naming_the_field(generator_service, reference, checks):
    svc = generator_service
    model = _model(svc)
    results = _others(svc)
    for path, body, field in [
        ("/generate", {"text": "a\ud800b"}, "text"),
        ("/generate", {"text": ["ok", "\udfff"]}, "text[1]"),
        ("/generate", {"input_ids": [5], "sampling_params": {"stop": ["\ud800"]}}, "sampling_params.stop[0]"),
        ("/generate", {"input_ids": [5], "rid": "\ud83d"}, "rid"),
        ("/v1/completions", {"model": model, "prompt": "\ud800"}, "prompt"),
        (
            "/v1/chat/completions",
            {"model": model, "messages": [{"role": "user", "content": "\ud800"}]},
            "messages[0].content",
        ),
        ("/update_weights_from_disk", {"model_path": "/tmp/\ud800"}, "model_path"),
    ]:
        raw = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as the escape \ud800
        status, out = svc.call("POST", path, raw=raw, headers={"Content-Type": "application/json"})
        assert status == 400 and isinstance(out, dict), (path, status, out)
        message = out["error"]["message"] if "error" in out else out["message"]
        assert field in message and "surrogate" in message, (path, message)
    # the surrogate as raw (invalid) UTF-8 bytes, not an escape
    status, out = svc.call("POST", "/generate", raw=b'{"text": "a\xed\xa0\x80"}')
    assert status == 400 and isinstance(out, dict), out
    _assert_others_fine(results, reference)
    checks["generator"](svc)


# ---- 4: sequences per request and per server --------------------------------------------------
def test_prompts_times_n_is_capped_on_every_route(generator_service, checks):
    svc = generator_service
    model = _model(svc)
    t0 = time.monotonic()
    status, out = svc.call(
        "POST", "/v1/completions", {"model": model, "prompt": [[5, 6]] * 1000, "n": 128, "max_tokens": 1}
    )
    assert status == 400 and "max_sequences_per_request" in out["error"]["message"], out
    status, out = svc.call(
        "POST", "/generate", {"input_ids": [[5, 6]] * 600, "sampling_params": {"n": 2, "max_new_tokens": 1}}
    )
    assert status == 400 and "max_sequences_per_request" in out["error"]["message"], out
    assert time.monotonic() - t0 < 10
    checks["generator"](svc)


def test_aborting_thousands_of_waiting_requests_is_linear(ref_model_cpu):
    """The engine paused with 40,000 requests queued: a client leaving with 1,000 of them (the
    probe's disconnect, which took 38.6 s of step-lock time) is one O(1)-per-request pass."""
    from areal_mem.rollout.generator.embedded.engine import Engine, Request
    from areal_mem.rollout.generator.embedded.sampling import SamplingSpec

    e = Engine(ref_model_cpu, eos_ids=[2], max_batch_size=4, max_context_len=64).start()
    try:
        e.pause("in_place")
        done = []
        for i in range(40_000):
            e.submit(Request(f"r{i}", [5, 6], SamplingSpec(max_new_tokens=2), done.append))
        assert e.waiting() == 40_000 and e.has_rid("r39999")
        t0 = time.monotonic()
        assert e.abort_many([f"r{i}" for i in range(20_000, 21_000)], "client disconnected") == 1000
        took = time.monotonic() - t0
        assert took < 1.0, took
        assert e.waiting() == 39_000 and not e.has_rid("r20500") and len(done) == 1000
        e.resume()
        deadline = time.monotonic() + 60
        while e.waiting() > 38_000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert e.waiting() <= 38_000  # admission skips the aborted ones and goes on
        e.abort()
        assert e.in_flight() == 0
        print(f"abort of 1,000 of 40,000 waiting requests: {took * 1e3:.1f} ms")
    finally:
        e.stop()


@pytest.fixture(scope="module")
def ref_model_cpu(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


# ---- 6: text, top log-probs, stop lists, stream bytes ------------------------------------------
def test_huge_text_is_refused_before_tokenising_and_health_stays_fast(generator_service, reference, checks):
    svc = generator_service
    text = "word " * 1_600_000  # 8 MB
    stop = threading.Event()
    health = []

    def probe():
        while not stop.is_set():
            t0 = time.monotonic()
            assert svc.call("GET", "/health")[0] == 200
            health.append(time.monotonic() - t0)
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    results = _others(svc)
    try:
        t0 = time.monotonic()
        status, out = svc.call("POST", "/generate", {"text": text})
        took = time.monotonic() - t0
        assert status == 400 and "max_text_bytes" in out["error"]["message"] and "text" in out["error"]["message"]
        model = _model(svc)
        status, out = svc.call("POST", "/v1/completions", {"model": model, "prompt": text})
        assert status == 400 and "prompt" in out["error"]["message"], out
        status, out = svc.call(
            "POST", "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": text}]}
        )
        assert status == 400 and "messages" in out["error"]["message"], out
    finally:
        stop.set()
        prober.join()
    _assert_others_fine(results, reference)
    print(f"8 MB text: 400 in {took:.2f} s; /health max {max(health) * 1e3:.0f} ms")
    assert took < 3.0 and max(health) < 1.0
    checks["generator"](svc)


def test_top_logprobs_are_capped(generator_service, checks):
    svc = generator_service
    status, out = svc.call("POST", "/generate", {"input_ids": [5, 6], "return_logprob": True, "top_logprobs_num": 21})
    assert (
        status == 400
        and "top_logprobs_num" in out["error"]["message"]
        and "max_top_logprobs" in out["error"]["message"]
    )
    status, out = svc.call(
        "POST",
        "/generate",
        {"input_ids": [5, 6], "return_logprob": True, "top_logprobs_num": 20, "sampling_params": {"max_new_tokens": 2}},
    )
    assert status == 200 and all(len(row) == 20 for row in out["meta_info"]["output_top_logprobs"])
    checks["generator"](svc)


def test_a_long_stream_costs_linear_bytes(generator_service, checks):
    """Chunks stay cumulative (SGLang's default, what its clients parse); one is sent per 1/16
    growth once the output is long, so 2,000 tokens cost about 17x the final chunk, not 1,000x."""
    svc = generator_service
    n = 2000
    body = {"input_ids": [5, 6], "stream": True, "sampling_params": {"max_new_tokens": n, "ignore_eos": True}}
    status, raw, _ = checks["http_call"](
        svc.url, "POST", "/generate", json.dumps(body).encode(), {"Authorization": f"Bearer {svc.token}"}, timeout=300
    )
    assert status == 200
    events = [e[len(b"data: ") :] for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    sizes = [len(c["output_ids"]) for c in chunks]
    assert sizes == sorted(sizes) and sizes[-1] == n and sizes[:16] == list(range(1, 17))
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": n}
    total, last = sum(len(e) for e in events), len(events[-2])
    print(f"{n}-token stream: {len(chunks)} chunks, {total / 1e6:.2f} MB ({total / last:.1f}x the final chunk)")
    assert total < 25 * last
    checks["generator"](svc)


# ---- 9: weights files ---------------------------------------------------------------------------
def _checkpoint(folder, tiny_model_dir, change=None):
    from safetensors.torch import load_file, save_file

    os.makedirs(folder, exist_ok=True)
    state = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    if change:
        state = change(state)
    save_file(state, os.path.join(folder, "model.safetensors"))


def test_weights_files_are_checked_not_only_their_folder(generator_service, tiny_model_dir, tmp_path, checks):
    svc = generator_service
    allowed = svc.extra["allowed"]
    outside = tmp_path / "outside"
    _checkpoint(str(outside), tiny_model_dir)
    linked = os.path.join(allowed, "linked")
    os.makedirs(linked, exist_ok=True)
    if not os.path.lexists(os.path.join(linked, "model.safetensors")):
        os.symlink(outside / "model.safetensors", os.path.join(linked, "model.safetensors"))
    status, out = svc.call("POST", "/update_weights_from_disk", {"model_path": linked})
    assert status == 403 and out["success"] is False and "weights_dirs" in out["message"], out
    assert str(outside) in out["message"]  # names where the link leads

    nan = os.path.join(allowed, "nan")
    _checkpoint(nan, tiny_model_dir, lambda s: {k: torch.full_like(v, float("nan")) for k, v in s.items()})
    status, out = svc.call("POST", "/update_weights_from_disk", {"model_path": nan})
    assert status == 400 and out["success"] is False and "not finite" in out["message"], out
    assert "model.embed_tokens.weight" in out["message"] or "weight" in out["message"]

    huge = os.path.join(allowed, "huge_header")
    os.makedirs(huge, exist_ok=True)
    with open(os.path.join(huge, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 94_000_000) + b"{" + b" " * 94_000_000)
    t0 = time.monotonic()
    status, out = svc.call("POST", "/update_weights_from_disk", {"model_path": huge})
    took = time.monotonic() - t0
    assert status == 400 and "header of 94000000 bytes" in out["message"], out
    assert took < 2.0, took
    checks["generator"](svc)  # the same greedy tokens, weight_version "0": nothing was swapped


def test_default_weights_folders_are_absolute(tmp_path, monkeypatch):
    from areal_mem.config import load_run
    from areal_mem.rollout.generator.command import _weights_dirs

    monkeypatch.chdir(tmp_path)
    cfg = load_run([], ["run_dir=relative_run"], optional=["model.path"])
    dirs = _weights_dirs(cfg, "model_dir")
    assert all(os.path.isabs(d) for d in dirs) and os.path.join(str(tmp_path), "relative_run", "weights") in dirs


# ---- 15: slime's default sampling parameters -------------------------------------------------
def test_slimes_default_sampling_params_are_served(generator_service, tiny_model_dir, checks):
    """slime (THUDM/slime, slime/rollout/sglang_rollout.py, GenerateState) sends exactly these on
    every /generate (its defaults: temperature 1.0, top_p 1.0, top_k -1, no stop strings or ids,
    skip_special_tokens false); rollout_max_response_len is the user's, 8 here."""
    from transformers import AutoTokenizer

    svc = generator_service
    sampling_params = dict(
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        max_new_tokens=8,
        stop=None,
        stop_token_ids=None,
        skip_special_tokens=False,
        no_stop_trim=True,
        spaces_between_special_tokens=False,
    )
    status, out = svc.call(
        "POST", "/generate", {"input_ids": [5, 6, 7], "sampling_params": sampling_params, "return_logprob": True}
    )
    assert status == 200, out
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = out["output_ids"]
    assert out["text"] == tok.decode(ids, skip_special_tokens=False, spaces_between_special_tokens=False)
    assert len(out["meta_info"]["output_token_logprobs"]) == len(ids) >= 1
    checks["generator"](svc)


def test_spaces_between_special_tokens_reaches_the_tokenizer():
    from areal_mem.rollout.generator.embedded.codec import TextCodec

    seen = []

    class Slow:
        def decode(self, ids, skip_special_tokens, spaces_between_special_tokens):
            seen.append(spaces_between_special_tokens)
            return (" " if spaces_between_special_tokens else "").join(str(i) for i in ids)

    codec = TextCodec(Slow())
    assert codec.decode([1, 2], False, False) == "12" and codec.decode([1, 2], False, True) == "1 2"
    assert seen == [False, True]


# ---- 5: weight-group joins on their own thread, bounded ----------------------------------------
@pytest.fixture
def own_generator(tiny_model_dir, rel_dir, generator_service):
    """A server of this test's own (it gets SIGTERM, or its limits are small), called as the
    shared one is (`generator_service`'s class, the same token)."""
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    def start(**limits):
        cfg = EmbeddedConfig(max_batch_size=4, torch_threads=1, device="cpu", **limits)
        log = str(rel_dir / f"own_generator_{len(handles)}.log")
        h = start_embedded_generator(tiny_model_dir, cfg, token=generator_service.token, log_path=log)
        handles.append(h)
        return h, type(generator_service)(h.url, h.log_path, h.child.proc.pid)

    handles = []
    yield start
    for h in handles:
        h.stop()


def _silent_peer():
    """A port that accepts connections and never answers (the probe's peer)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    return srv


def _init_body(port: int, name: str) -> dict:
    return {
        "master_address": "127.0.0.1",
        "master_port": port,
        "rank_offset": 1,
        "world_size": 2,
        "group_name": name,
        "backend": "gloo",
    }


def test_a_join_to_a_silent_peer_holds_no_other_route_and_sigterm_exits(own_generator):
    h, svc = own_generator(weight_group_connect_timeout_s=6)
    peer = _silent_peer()
    try:
        pool = ThreadPoolExecutor(1)
        t0 = time.monotonic()
        first = pool.submit(svc.call, "POST", "/init_weights_update_group", _init_body(peer.getsockname()[1], "g1"))
        time.sleep(1.0)
        status, out = svc.call("POST", "/init_weights_update_group", _init_body(peer.getsockname()[1], "g2"))
        assert status == 409 and out["success"] is False and "one join at a time" in out["message"], out
        timings = {}
        for method, path, body in [
            ("POST", "/pause_generation", {"mode": "abort"}),
            ("POST", "/update_weight_version", {"new_version": "7", "abort_all_requests": False}),
            ("POST", "/continue_generation", {}),
            (
                "POST",
                "/generate",
                {
                    "input_ids": [5, 6, 7],
                    "return_logprob": True,
                    "logprob_start_len": 0,
                    "sampling_params": {"max_new_tokens": 2},
                },
            ),
            ("GET", "/model_info", None),
        ]:
            s0 = time.monotonic()
            status, out = svc.call(method, path, body)
            timings[path] = time.monotonic() - s0
            assert status == 200, (path, out)
        assert max(timings.values()) < 3.0, timings
        status, out = first.result(timeout=60)
        took = time.monotonic() - t0
        assert status == 400 and out["success"] is False and "weight_group_connect_timeout_s" in out["message"], out
        assert took < 6 + 10, took
        print(f"join to a silent peer: refused after {took:.1f} s; other routes at most {max(timings.values()):.2f} s")
        # SIGTERM while another join waits on the silent peer: the process exits promptly
        pool.submit(svc.call, "POST", "/init_weights_update_group", _init_body(peer.getsockname()[1], "g3"))
        time.sleep(1.0)
        s0 = time.monotonic()
        h.child.proc.terminate()
        h.child.proc.wait(timeout=15)
        exit_s = time.monotonic() - s0
        print(f"exit after SIGTERM with a join waiting: {exit_s:.2f} s")
        assert exit_s < 8.0
        pool.shutdown(wait=False)
    finally:
        peer.close()


# ---- 7: slow and surplus connections -----------------------------------------------------------
def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _slow_clients(url: str, n: int, interval: float, stop: threading.Event, closed_at: list):
    """`n` connections sending one header line every `interval` s, never the end of the headers."""
    from urllib.parse import urlparse

    u = urlparse(url)
    socks = []
    for _ in range(n):
        s = socket.create_connection((u.hostname, u.port))
        s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    t0 = time.monotonic()

    def drip():
        live = list(socks)
        while live and not stop.is_set():
            for s in list(live):
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                    s.settimeout(0.01)
                    if s.recv(1024) == b"":
                        raise ConnectionResetError
                except TimeoutError:
                    continue
                except OSError:
                    closed_at.append(time.monotonic() - t0)
                    live.remove(s)
            time.sleep(interval)
        for s in socks:
            s.close()

    t = threading.Thread(target=drip)
    t.start()
    return t


def test_slow_headers_are_closed_and_connections_capped(own_generator):
    h, svc = own_generator(http_idle_timeout_s=2.0, max_connections=48)
    base = _fds(svc.pid)
    stop, closed_at = threading.Event(), []
    drip = _slow_clients(svc.url, 40, 0.5, stop, closed_at)
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        assert svc.call("POST", "/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}})[0] == 200
        assert time.monotonic() - t0 < 2.0
        deadline = time.monotonic() + 10
        while len(closed_at) < 40 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(closed_at) == 40 and max(closed_at) < 2.0 + 2.0, closed_at
    finally:
        stop.set()
        drip.join()
    # a flood of idle connections: the ones past max_connections are closed at once
    flood = []
    try:
        for _ in range(150):
            flood.append(socket.create_connection(("127.0.0.1", int(svc.url.rsplit(":", 1)[1]))))
        time.sleep(0.5)
        during = _fds(svc.pid)
        print(f"150 idle connections, max_connections 48: server fds {base} -> {during}")
        assert during <= base + 48 + 8
    finally:
        for s in flood:
            s.close()
    time.sleep(2.5)
    assert svc.call("GET", "/health")[0] == 200
    assert _fds(svc.pid) <= base + 8


def test_the_retriever_closes_slow_headers_too(world_dir, tmp_path):
    """`retriever.http_idle_timeout_s` (here 2 s): ten connections that send a header line every
    second are closed within the timeout; the service answers meanwhile."""
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.launch import start_retriever

    index = str(tmp_path / "bm25")
    build_index(os.path.join(world_dir, "corpus.jsonl"), index, "bm25", show_progress=False)
    overrides = ["retriever.threads=1", "retriever.http_idle_timeout_s=2"]
    with start_retriever(index, overrides=overrides) as handle:
        stop, closed_at = threading.Event(), []
        drip = _slow_clients(handle.url, 10, 1.0, stop, closed_at)
        try:
            deadline = time.monotonic() + 15
            while len(closed_at) < 10 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(closed_at) == 10 and max(closed_at) < 2 + 4, closed_at
            assert handle.health()["status"] == "ok"
        finally:
            stop.set()
            drip.join()


def test_a_full_waiting_queue_is_a_503_and_the_queued_requests_complete(own_generator):
    _, svc = own_generator(max_waiting_sequences=8)
    assert svc.call("POST", "/pause_generation", {"mode": "in_place"})[0] == 200  # everything queues
    pool = ThreadPoolExecutor(1)
    try:
        queued = pool.submit(
            svc.call, "POST", "/generate", {"input_ids": [[5, 6]] * 8, "sampling_params": {"max_new_tokens": 2}}
        )
        deadline = time.monotonic() + 10
        while svc.call("GET", "/server_info")[1]["internal_states"][0]["in_flight"] < 8:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        status, out = svc.call("POST", "/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}})
        assert status == 503 and "max_waiting_sequences" in out["error"]["message"], out
        assert svc.call("POST", "/continue_generation", {})[0] == 200
        status, out = queued.result(timeout=60)
        assert status == 200 and len(out) == 8 and all(len(o["output_ids"]) == 2 for o in out)
        assert svc.call("POST", "/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}})[0] == 200
    finally:
        svc.call("POST", "/continue_generation", {})
        pool.shutdown()
