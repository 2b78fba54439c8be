"""`areal-mem sft`: learns the masked-in tokens of context rows, and names bad input exactly."""

import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.feather as feather
import pytest
import torch
from transformers import AutoModelForCausalLM

from areal_mem.learner.sft_data import SFTDataError, read_rows

PROMPT = [11, 12, 13, 14]
LEARN = [101, 102, 103, 104, 105]  # masked in: the model writes these
INJECT = [201, 202, 203]  # masked out: a tool response


def _row():
    resp = LEARN[:2] + INJECT + LEARN[2:]
    mask = [1, 1, 0, 0, 0, 1, 1, 1]
    return {"input_ids": PROMPT + resp, "prompt_len": len(PROMPT), "loss_mask": mask, "extra": "ignored"}


def _nll(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    r = _row()
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([r["input_ids"]])).logits[0, :-1], -1)
    tok = torch.tensor(r["input_ids"][1:])
    nll = -lp.gather(1, tok[:, None])[:, 0][len(PROMPT) - 1 :]
    mask = torch.tensor(r["loss_mask"], dtype=torch.bool)
    return nll[mask].mean().item(), nll[~mask].mean().item()


def test_sft_learns_only_masked_in_tokens(tiny_model_dir, tmp_path):
    data = tmp_path / "demos.jsonl"
    data.write_text("\n".join(json.dumps(_row()) for _ in range(8)) + "\n")
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "areal_mem.app.cli",
        "sft",
        "--data",
        str(data),
        f"run_dir={run_dir}",
        f"model.path={tiny_model_dir}",
        "learner.sft.epochs=6",
        "learner.sft.batch_rows=4",
        "learner.sft.lr=1e-2",
        "learner.loss.entropy_coef=0",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "[sft] done: 12 steps over 8 rows" in p.stdout
    before_in, before_out = _nll(tiny_model_dir)
    after_in, after_out = _nll(str(run_dir / "sft" / "model"))
    assert after_in < 0.25 * before_in  # the demonstrated tokens are learned
    assert after_out > 0.8 * before_out  # the injected ones are not
    assert os.path.isfile(run_dir / "sft" / "checkpoints" / "state.json")
    assert os.path.isfile(run_dir / "sft" / "model" / "tokenizer.json")


def test_sft_data_errors_name_file_and_line(tmp_path):
    good = json.dumps(_row())
    cases = {
        "not valid JSON": "{oops",
        "missing key(s) loss_mask": json.dumps({"input_ids": [1, 2], "prompt_len": 1}),
        "prompt_len 0 must be": json.dumps({"input_ids": [1, 2], "prompt_len": 0, "loss_mask": [1, 1]}),
        "loss_mask must be 1 values": json.dumps({"input_ids": [1, 2], "prompt_len": 1, "loss_mask": [1, 1]}),
    }
    for message, bad in cases.items():
        path = tmp_path / "d.jsonl"
        path.write_text(good + "\n" + bad + "\n")
        with pytest.raises(SFTDataError, match=re.escape(f"d.jsonl:2: {message}")):
            read_rows(str(path))
    other = tmp_path / "d.csv"
    other.write_text("")
    with pytest.raises(SFTDataError, match="d.csv: unknown format"):
        read_rows(str(other))


def test_sft_reads_arrow_rows(tmp_path):
    r = _row()
    table = pa.table(
        {
            "input_ids": [r["input_ids"]],
            "prompt_len": [r["prompt_len"]],
            "loss_mask": pa.array([r["loss_mask"]], pa.list_(pa.int8())),
        }
    )
    feather.write_feather(table, str(tmp_path / "d.arrow"))
    rows = read_rows(str(tmp_path / "d.arrow"))
    assert rows[0].input_ids == r["input_ids"] and rows[0].loss_mask == r["loss_mask"]
    feather.write_feather(table.drop(["loss_mask"]), str(tmp_path / "e.arrow"))
    with pytest.raises(SFTDataError, match="e.arrow: missing column"):
        read_rows(str(tmp_path / "e.arrow"))


def test_sft_cosine_schedule_follows_deepspeed_warmup_cosine(tiny_model_dir, tmp_path):
    """`learner.sft.lr_schedule: cosine`: linear warm-up from 0, then cosine decay to min_lr_ratio x lr.

    12 steps, warm-up 4, lr 1e-2, floor 0.1: step k (1-based) uses DeepSpeed's ratio at iteration k-1;
    `sft/lr` is the rate the step used."""
    import math

    data = tmp_path / "demos.jsonl"
    data.write_text("\n".join(json.dumps(_row()) for _ in range(8)) + "\n")
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "areal_mem.app.cli", "sft", "--data", str(data), f"run_dir={run_dir}"]
    cmd += [f"model.path={tiny_model_dir}", "learner.log_interval=1", "learner.sft.epochs=6"]
    cmd += ["learner.sft.batch_rows=4", "learner.sft.lr=1e-2", "learner.sft.lr_schedule=cosine"]
    cmd += ["learner.sft.warmup_steps=4", "learner.sft.min_lr_ratio=0.1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = [json.loads(x) for x in open(run_dir / "metrics.jsonl")]
    lrs = [r["lr"] for r in rows if r["kind"] == "sft"]

    def expected(it):  # DeepSpeed WarmupCosineLR, linear warm-up over 4 iterations, 12 in all
        if it < 4:
            return 1e-2 * it / 4
        progress = min(1.0, (it - 4 + 1) / (12 - 4))
        return 1e-2 * (0.1 + 0.9 * (1 + math.cos(math.pi * progress)) / 2)

    assert lrs == pytest.approx([expected(k) for k in range(12)], rel=1e-9)
    assert lrs[0] == 0.0 and lrs[4] == pytest.approx(1e-2 * (0.1 + 0.9 * (1 + math.cos(math.pi / 8)) / 2))
    assert lrs[-1] == pytest.approx(1e-3)

    # without a warm-up the first step runs at the full rate (DeepSpeed alone would give it 0)
    no_warmup = [c for c in cmd if not c.startswith("learner.sft.warmup_steps=")]
    no_warmup[no_warmup.index(f"run_dir={run_dir}")] = f"run_dir={tmp_path / 'run0'}"
    p = subprocess.run(
        no_warmup, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300
    )
    assert p.returncode == 0, p.stderr[-4000:]
    lrs = [json.loads(x)["lr"] for x in open(tmp_path / "run0" / "metrics.jsonl") if '"sft"' in x]
    # DeepSpeed's shortest warm-up is 2 iterations, here at the full rate (warmup_min_ratio 1)
    decay = [1e-2 * (0.1 + 0.9 * (1 + math.cos(math.pi * min(1.0, (k - 1) / 10))) / 2) for k in range(2, 12)]
    assert lrs == pytest.approx([1e-2, 1e-2, *decay], rel=1e-9)


def test_sft_schedule_keys_are_checked():
    from areal_mem.config import ConfigError, load_run

    with pytest.raises(ConfigError, match="key 'learner.sft.min_lr_ratio' is 1.5; allowed: >= 0 and <= 1"):
        load_run(overrides=["model.path=m", "learner.sft.min_lr_ratio=1.5"])
    with pytest.raises(ConfigError, match="learner.sft.lr_schedule"):
        load_run(overrides=["model.path=m", "learner.sft.lr_schedule=linear"])
