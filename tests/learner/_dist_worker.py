"""One learner step on a fixed batch, run under torch.distributed.run by the tests.

Writes (rank 0) the metrics and the updated weights so that runs with different
rank counts can be compared. One DeepSpeed engine per process, as the learner and SFT run it:
a CI run that built a second engine in the same two gloo ranks aborted rank 0 ("terminate
called without an active exception") after both had loaded the model, which the production
path never does.
"""

import json
import sys

import torch
from safetensors.torch import save_file

from areal_mem.config.learner import LearnerConfig, LossConfig
from areal_mem.learner.batch import TrainRow
from areal_mem.learner.engine import LearnerEngine


def fixed_rows(vocab: int, n: int = 7, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        plen = int(torch.randint(2, 9, (1,), generator=g))
        rlen = int(torch.randint(3, 17, (1,), generator=g))
        ids = torch.randint(3, vocab, (plen + rlen,), generator=g).tolist()
        mask = [0 if (j % 5 == 4) else 1 for j in range(rlen)]
        behav = [(-3.0 - float(torch.rand(1, generator=g))) * m for m in mask]
        adv = [(1.0 if i % 2 else -0.7) * m for m in mask]
        rows.append(TrainRow(ids, plen, mask, behav, [0 if m else -1 for m in mask], adv))
    return rows


def plain_loss(model_dir, rows, loss_cfg):
    """The first mini-batch's token-mean loss by plain PyTorch: one padded batch, no DeepSpeed."""
    from transformers import AutoModelForCausalLM

    from areal_mem.learner.batch import collate
    from areal_mem.learner.loss import ppo_token_loss, token_logp_entropy

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    b = collate(rows)
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    logp, ent = token_logp_entropy(logits[:, :-1], b["labels"])
    per_tok, _ = ppo_token_loss(logp, logp, b["behav_logp"], b["advantages"], b["loss_mask"], loss_cfg, entropy=ent)
    return float(per_tok.sum() / b["loss_mask"].sum())


def main():
    """argv: model dir, output prefix, ZeRO stage, mini-batch count."""
    model_dir, out_prefix, stage, mini = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cfg = LearnerConfig(
        lr=1e-3,
        zero_stage=stage,
        micro_batch_tokens=48,
        mini_batches=mini,
        loss=LossConfig(entropy_coef=0.01, behav_weight_cap=5.0),
    )
    eng = LearnerEngine(model_dir, cfg)
    rows = fixed_rows(eng.engine.module.config.vocab_size)
    expected = plain_loss(model_dir, rows, eng.cfg.loss) if eng.world == 1 else None
    m = eng.train_step(rows, version=0)
    weights = {n: t.cpu().clone().contiguous() for n, t in eng.named_weights()}
    if eng.rank == 0:
        save_file(weights, f"{out_prefix}_m{mini}.safetensors")
        with open(f"{out_prefix}_m{mini}.json", "w") as f:
            json.dump(dict(m, expected_loss=expected), f)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
