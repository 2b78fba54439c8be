"""LoRA steps under DeepSpeed, run under torch.distributed.run by tests/learner/test_lora.py.

argv: model dir, output prefix, ZeRO stage, mode. `straight`: an RL step, a checkpoint, then an
SFT step; `resume`: load that checkpoint in a fresh engine, then the same SFT step. Rank 0 writes
the adapter and the merged weights after the last step, and the step's metrics."""

import json
import sys

import torch
from safetensors.torch import save_file

from areal_mem.config.learner import LearnerConfig, LoraConfig
from areal_mem.learner.checkpoint import CheckpointManager, TrainState
from areal_mem.learner.engine import LearnerEngine

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _dist_worker import fixed_rows  # noqa: E402


def main():
    model_dir, prefix, stage, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    cfg = LearnerConfig(
        lr=1e-2,
        zero_stage=stage,
        micro_batch_tokens=48,
        lora=LoraConfig(enabled=True, rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj"]),
    )
    eng = LearnerEngine(model_dir, cfg, seed=3)
    ckpt = CheckpointManager(prefix + "_run")
    rows = fixed_rows(eng.engine.module.config.vocab_size)
    metrics = {}
    if mode == "straight":
        metrics["rl"] = eng.train_step(rows, version=0)
        ckpt.save(eng, TrainState(step=1, version=1))
    else:
        assert ckpt.load(eng) == TrainState(step=1, version=1)
    metrics["sft"] = eng.sft_step(rows[:5])
    adapter = {n: t.cpu().contiguous() for n, t in eng.adapter_weights()}
    merged = {n: t.cpu().contiguous() for n, t in eng.named_weights()}
    trainable = [n for n, p in eng.engine.module.named_parameters() if p.requires_grad]
    if eng.rank == 0:
        save_file(adapter, f"{prefix}_{mode}_adapter.safetensors")
        save_file(merged, f"{prefix}_{mode}_merged.safetensors")
        with open(f"{prefix}_{mode}.json", "w") as f:
            json.dump({"metrics": metrics, "trainable": trainable}, f)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
