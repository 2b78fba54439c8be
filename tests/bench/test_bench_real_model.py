"""benchmarks/bench_real_model.py: the FLOP counter against a hand count, the trace extraction from
an evaluation's results, and the whole benchmark at tiny sizes on a tiny random Llama (--smoke)."""

import json
import os
import subprocess
import sys

from transformers import LlamaConfig

from benchmarks.bench_real_model import flops, forward_flops, layer_matmul_params, trace_from_eval, train_flops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# 2 layers, hidden 8, 2 query heads sharing 1 KV head of 4 dims, MLP 16, vocabulary 10
SMALL = LlamaConfig(
    vocab_size=10,
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    tie_word_embeddings=True,
)


def test_flops_by_hand():
    # per layer: q 8x8 + k 8x4 + v 8x4 + o 8x8 = 192; MLP 3 x 8 x 16 = 384 -> 576; 2 layers 1152
    assert layer_matmul_params(SMALL) == 1152
    # 3 prompt + 2 new tokens: 4 tokens through the layers (the last sampled token is not fed),
    # logits at 2 positions (last prompt position, one decode step), positions see 1, 2, 3, 4 keys
    body = 2 * 1152 * 4
    head = 2 * 8 * 10 * 2
    attention = 2 * 2 * 2 * 2 * 4 * (1 + 2 + 3 + 4)
    assert flops(SMALL, 3, 2) == body + head + attention == 10176
    assert flops(SMALL, 3, 0) == 0
    # prefill and decode in pieces add up to the whole: a forward after 3 cached positions
    assert forward_flops(SMALL, 3, head_positions=1) + forward_flops(SMALL, 1, past=3, head_positions=1) == 10176
    # the learner: 3 x a forward over the row, the head at its trained positions
    row = type("Row", (), {"input_ids": [1] * 5, "loss_mask": [1, 0]})()
    assert train_flops(SMALL, [row]) == 3 * (2 * 1152 * 5 + 2 * 8 * 10 * 1 + 2 * 2 * 2 * 2 * 4 * 15)


def test_flops_real_shape():
    """SmolLM2-135M's config: the layers' matmuls are its parameters less embeddings and norms."""
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    )
    norms = 30 * 2 * 576 + 576
    assert layer_matmul_params(cfg) + 49152 * 576 + norms == 134_515_008


def test_trace_from_eval(tmp_path):
    results = tmp_path / "results.jsonl"
    episodes = [
        {"context_tokens": [620], "prefill_tokens": 502, "token_versions": {"0": 118}, "tool_calls": 0},
        {"context_tokens": [524], "prefill_tokens": 500, "token_versions": {"0": 24}, "tool_calls": 0},
        # searched: action 40 tokens, 200 injected, memory 60: C = 500+40+200+60, F = 500 + 740
        {"context_tokens": [800], "prefill_tokens": 1240, "token_versions": {"0": 100}, "tool_calls": 1},
        {"context_tokens": [500, 600], "prefill_tokens": 1000, "token_versions": {"0": 90}, "tool_calls": 1},
    ]
    results.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    trace, note = trace_from_eval(str(results), concurrency=2)
    assert [(r["prompt_len"], r["output_len"], r.get("after")) for r in trace] == [
        (502, 118, None),
        (500, 24, None),
        # the third episode starts when the first ends (2 in flight); its prompt is estimated as the
        # median exact one, 501 (1 over the true 500): memory m = 501 - (1240 - 800) = 61, action 39
        (501, 39, 0),
        (739, 61, 2),
    ]
    assert "1 episodes of several contexts left out" in note


def test_smoke(tmp_path):
    sys.path.insert(0, REPO)
    from tests.architectures import save

    model = save("llama-gqa-tied", str(tmp_path / "model"))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_real_model.py", "--model", model, "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for section in ("1. roofline", "2. FLOPs", "3. uniform", "4. MemSearcher trace (synthetic)", "5. learner"):
        assert section in proc.stdout
    res = json.loads((out / "bench_real_model.json").read_text())
    assert res["peak"]["gflops"] > 0
    assert res["uniform"]["by_concurrency"]["2"]["embedded"]["tokens"] == 2 * 4
    paths = res["trace"]["paths"]
    assert all("error" not in v for v in paths.values()), paths
    assert paths["embedded generator (HTTP, arrivals)"]["tokens_produced"] == res["trace"]["output_tokens"]
    assert paths["transformers continuous batching"]["tokens_produced"] == res["trace"]["output_tokens"]
    assert res["learner"]["gflops"] > 0
    assert len((out / "trace.jsonl").read_text().splitlines()) == res["trace"]["requests"]
