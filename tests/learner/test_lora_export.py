"""`areal-mem model export`: a LoRA run's checkpoint as a plain transformers folder, the adapter
merged or beside the base; transformers (and peft) load it and give the learner's log-probs,
which are the served ones (test_lora_push.py), within 1e-4. The run's final export too."""

import json

import torch
from transformers import AutoModelForCausalLM

from areal_mem.app.cli import main
from areal_mem.config import load_run, save_resolved
from areal_mem.config.learner import LearnerConfig, LoraConfig
from areal_mem.learner.batch import TrainRow
from areal_mem.learner.checkpoint import CheckpointManager, TrainState
from tests import architectures
from tests.learner._dist_worker import fixed_rows

TARGETS = ["q_proj", "o_proj", "up_proj"]
LORA = [
    "learner.lora.enabled=true",
    "learner.lora.rank=4",
    "learner.lora.alpha=8",
    f"learner.lora.target_modules={json.dumps(TARGETS)}",
]


def _forced(model, rows):
    out = []
    with torch.no_grad():
        for r in rows:
            logits = model(input_ids=torch.tensor([r.input_ids])).logits[0, r.prompt_len - 1 : -1]
            lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(r.input_ids[r.prompt_len :])[:, None])[:, 0]
            out.append(lp)
    return torch.cat(out)


def test_export_merged_and_beside(tmp_path):
    from peft import PeftModel

    from areal_mem.learner.engine import LearnerEngine

    base = architectures.save("llama-untied", str(tmp_path / "base"))
    run_dir = str(tmp_path / "run")
    cfg = load_run(overrides=[f"model.path={base}", f"run_dir={run_dir}", *LORA])
    save_resolved(cfg)
    lora = LoraConfig(enabled=True, rank=4, alpha=8.0, target_modules=TARGETS)
    engine = LearnerEngine(base, LearnerConfig(lr=2e-2, zero_stage=2, micro_batch_tokens=256, lora=lora))
    rows = fixed_rows(engine.engine.module.config.vocab_size)
    for step in range(2):
        assert engine.train_step(rows, version=step)["grad_norm"] > 0
    CheckpointManager(run_dir).save(engine, TrainState(step=2, version=2))
    rows = [
        TrainRow(
            r.input_ids,
            r.prompt_len,
            [1] * len(r.loss_mask),
            [0.0] * len(r.loss_mask),
            [0] * len(r.loss_mask),
            [0.0] * len(r.loss_mask),
        )
        for r in rows
    ]
    learner = torch.cat([torch.tensor(x) for x in engine.logprobs(rows)])
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    assert float((_forced(plain, rows) - learner).abs().max()) > 1e-3  # the adapter changed the model

    merged, beside, final = (str(tmp_path / n) for n in ("merged", "beside", "final"))
    assert main(["model", "export", run_dir, "--out", merged, "--merge"]) == 0
    assert main(["model", "export", f"{run_dir}/checkpoints/step2", "--out", beside]) == 0
    engine.export_hf(final)  # the run's own final export (learner.export_hf) merges too
    for path in (merged, final):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        assert not any("lora" in n for n, _ in model.named_parameters())
        assert float((_forced(model, rows) - learner).abs().max()) < 1e-4, path
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(beside, dtype=torch.float32), beside).eval()
    assert float((_forced(peft, rows) - learner).abs().max()) < 1e-4


def test_export_refuses_by_name(tmp_path, capsys):
    assert main(["model", "export", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoint" in capsys.readouterr().err
