"""A Hugging Face causal LM under DeepSpeed, and one optimiser step over a batch of rows.

The step is written for any number of ranks: the rows of a mini-batch are spread
over the ranks by token count, each rank packs its share into micro-batches by
the token budget, all ranks agree on the micro-batch count (ZeRO reduces inside
backward), and every micro-batch loss is divided by the token count of the whole
mini-batch on all ranks. DeepSpeed averages gradients over ranks, so the loss is
multiplied back by the world size: the result is the token-mean over every
context of the mini-batch, whatever the ranks or the packing.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections import defaultdict
from types import MethodType
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from areal_mem.config.learner import Dtype, LearnerConfig, ProxMode

from . import distributed as D
from . import head, lora, shared_prefix
from .batch import TrainRow, collate
from .loss import (
    MISMATCH_SUMS,
    loglinear_prox_logp,
    mismatch_metrics,
    mismatch_sums,
    ppo_token_loss,
)
from .packing import pack_by_tokens, split_balanced, split_contiguous

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "generation_config.json",
)


def deepspeed_config(cfg: LearnerConfig, scheduler: Optional[dict] = None) -> dict:
    """DeepSpeed's JSON config; torch's AdamW (`torch_adam`) so no CPU Adam op has to compile.

    `scheduler` is a DeepSpeed `scheduler` section (SFT's decay); none keeps the rate constant."""
    out = {
        "train_micro_batch_size_per_gpu": 1,  # rows per micro-batch vary; only the boundary matters
        "gradient_accumulation_steps": 1,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": cfg.lr,
                "weight_decay": cfg.weight_decay,
                "betas": [cfg.adam_beta1, cfg.adam_beta2],
                "torch_adam": True,
            },
        },
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.dtype == Dtype.bfloat16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if scheduler is not None:
        out["scheduler"] = scheduler
    return out


def forward_at(
    self,
    input_ids: torch.Tensor,
    keep: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    tree: Optional[shared_prefix.Node] = None,
    lengths: Optional[List[int]] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The learner's forward of a causal LM over right-padded rows: the backbone on every
    position, the output head only at label positions `keep` ([B, L-1] bool) -> the log-probs
    of `labels` ([n_keep]) and the entropies there, of softmax(logits / temperature).

    No padding mask: in a right-padded row no real token comes after a pad, so the causal mask
    alone is exact for every real position (pads' own outputs are never read), and without a
    mask the attention kernels may skip the masked half or run FlashAttention on a GPU, which a
    padding mask rules out. On the paper recipe's MemSearcher rows (PyTorch's CPU flash kernel)
    the log-probs are bit-identical to the masked forward's and the gradients differ in the last
    bits (<= 3e-8), so a seed's SFT does not repeat bit for bit a run from before this change.

    A whole batch's logits are B x L x vocab floats (8k tokens x 152k vocab: 5 GB in fp32), most
    of them at prompt and tool-response positions that no loss reads; and even at the trained
    positions alone the head is computed a chunk at a time (`areal_mem.learner.head`). Installed as the
    model's `forward`, so DeepSpeed's engine and ZeRO-3's module hooks see an ordinary forward.
    Models whose head is more than a linear layer (logit soft-capping) are refused at load.

    `tree` (with the rows' `lengths`): the rows' prefix tree, each shared prefix computed once
    (`areal_mem.learner.shared_prefix`); the same hidden states at `keep`.
    """
    if tree is not None:
        if lengths is None:
            raise ValueError("forward_at: a prefix tree needs the rows' lengths")
        picked = shared_prefix.tree_hidden(self.base_model, input_ids, lengths, tree, keep)
    else:
        picked = self.base_model(input_ids=input_ids).last_hidden_state[:, :-1][keep]
    return self.get_output_embeddings()(picked, labels, temperature)


def _load_causal_lm(path: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if getattr(model.config, "final_logit_softcapping", None):
        raise ValueError(f"{path}: final_logit_softcapping is not supported by the learner's output head")
    model.config.use_cache = False
    model.forward = MethodType(forward_at, model)
    head.install(model.get_output_embeddings())
    return model


MicroLoss = Callable[
    [Dict[str, torch.Tensor], torch.Tensor, torch.Tensor, Dict[str, torch.Tensor]],
    Tuple[torch.Tensor, Dict[str, torch.Tensor]],
]


class LearnerEngine:
    """The policy model on every rank; rank 0 also talks to the generators and the buffer."""

    def __init__(self, model_path: str, cfg: LearnerConfig, seed: int = 0, scheduler: Optional[dict] = None):
        import deepspeed

        D.init_distributed()
        self.cfg, self.model_path = cfg, model_path
        self.rank, self.world = D.rank(), D.world_size()
        torch.manual_seed(seed)
        model = _load_causal_lm(model_path)
        if cfg.shared_prefix:
            shared_prefix.check_model(model.config, cfg.gradient_checkpointing)
        if cfg.lora.enabled:  # only the adapter trains (and has optimiser state); `lora.py`
            model = lora.apply(model, cfg.lora)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.ref = None
        if cfg.loss.kl_coef > 0:
            self.ref = _load_causal_lm(model_path).to(D.device())
            self.ref.eval().requires_grad_(False)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=deepspeed_config(cfg, scheduler),
        )
        if cfg.lora.enabled:
            lora.checkpoint_adapter_only(self.engine)
        if scheduler is not None:
            # DeepSpeed's schedulers start at iteration -1, where they set the rate to 0, and step
            # after each optimiser step: step once so that step 1 runs at iteration 0 as the
            # schedule defines it (a resumed run then loads the iteration from its checkpoint)
            self.engine.lr_scheduler.step()
        self.global_step = 0

    # ---- forward passes ----
    def _forward(
        self, batch: Dict[str, torch.Tensor], module=None, keep: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Label-aligned log-probs and entropies [B, L-1] at `keep` (default: the loss mask), 0 elsewhere."""
        dev = D.device()
        keep = (batch["loss_mask"] > 0 if keep is None else keep).to(dev)
        logp, ent = (module or self.engine)(
            input_ids=batch["input_ids"].to(dev),
            keep=keep,
            labels=batch["labels"].to(dev)[keep],
            temperature=self.cfg.temperature,
            tree=batch.get("tree"),
            lengths=batch.get("lengths"),
        )
        zeros = torch.zeros(keep.shape, dtype=logp.dtype, device=dev)
        return zeros.masked_scatter(keep, logp), zeros.masked_scatter(keep, ent)

    @torch.no_grad()
    def logprobs(self, rows: Sequence[TrainRow]) -> List[List[float]]:
        """Per row: the log-prob of each response token under the current weights (local rows)."""
        out = []
        for idx in pack_by_tokens([len(r) for r in rows], self.cfg.micro_batch_tokens):
            b = collate([rows[i] for i in idx])
            logp, _ = self._forward(b, keep=b["response_mask"])
            for j, i in enumerate(idx):
                s = rows[i].prompt_len - 1
                out.append((i, logp[j, s : s + len(rows[i].loss_mask)].cpu().tolist()))
        return [lp for _, lp in sorted(out)]

    def _collate(self, rows: Sequence[TrainRow]) -> Dict:
        """`collate`, plus the rows' prefix tree and lengths with `learner.shared_prefix`."""
        b: Dict[str, Any] = dict(collate(rows))
        if self.cfg.shared_prefix and rows:
            b["tree"] = shared_prefix.build_tree(rows, self.cfg.shared_prefix_min_tokens)
            b["lengths"] = [len(r) for r in rows]
        return b

    # ---- one optimiser step ----
    def _plan(self, rows: Sequence[TrainRow], mini_batches: int) -> List[List[List[TrainRow]]]:
        """mini-batch -> this rank's micro-batches (same count on every rank) -> rows."""
        plan = []
        for mb in split_contiguous(len(rows), max(1, mini_batches)):
            mb_rows = [rows[i] for i in mb]
            if self.cfg.shared_prefix:
                micro = shared_prefix.plan_rank(mb_rows, self.world, self.rank, self.cfg.micro_batch_tokens)
            else:
                mine = [mb_rows[i] for i in split_balanced([len(r) for r in mb_rows], self.world)[self.rank]]
                budget = self.cfg.micro_batch_tokens
                micro = [[mine[i] for i in b] for b in pack_by_tokens([len(r) for r in mine], budget)]
            n = D.all_reduce_max(len(micro))
            plan.append(micro + [[] for _ in range(n - len(micro))])
        return plan

    def _optimizer_step(
        self, micro: List[List[TrainRow]], loss_fn: MicroLoss, extra: List[Dict[str, torch.Tensor]]
    ) -> Dict[str, float]:
        """Forward/backward every micro-batch, then one DeepSpeed step; metrics summed over ranks.

        The loss is the weighted sum of the per-token losses over the whole mini-batch divided by
        the sum of the rows' weight x tokens on all ranks (`learner.loss_agg`: with weight 1 the
        token-mean); the per-token statistics are token-means whatever the weights."""
        n_local = sum(r.num_loss_tokens for mb in micro for r in mb)
        units = D.all_reduce_sums({"units": sum(r.loss_units for mb in micro for r in mb)})["units"]
        scale = self.world / max(units, 1e-12)
        sums: Dict[str, float] = defaultdict(float)
        for k, (rows, ext) in enumerate(zip(micro, extra)):
            b = self._collate(rows)
            logp, ent = self._forward(b)
            per_tok, stats = loss_fn(b, logp, ent, ext)
            weighted = per_tok * b["loss_weight"].to(per_tok.device)
            loss = weighted.sum() * scale
            self.engine.set_gradient_accumulation_boundary(k == len(micro) - 1)
            self.engine.backward(loss)
            sums["weighted_loss"] += float(weighted.detach().sum())
            for name, v in stats.items():
                sums[name] += float(v.sum())
        self.engine.step()
        self.global_step += 1
        sums["n_tokens"] = float(n_local)
        tot = D.all_reduce_sums(dict(sums))
        n = max(tot.pop("n_tokens"), 1.0)
        mean_loss = tot.pop("weighted_loss") / max(units, 1e-12)
        metrics = {k: v / n for k, v in tot.items()}
        metrics["loss"] = mean_loss
        metrics["n_tokens"] = n
        gn = self.engine.get_global_grad_norm()
        metrics["grad_norm"] = float(gn) if gn is not None else 0.0
        return metrics

    @torch.no_grad()
    def _pre_pass(self, micro: List[List[TrainRow]], want_prox: bool) -> List[Dict[str, torch.Tensor]]:
        """Proximal (weights before the update) and reference log-probs, before any update."""
        out = []
        for rows in micro:
            b = self._collate(rows)
            ext = {}
            if want_prox:
                ext["prox_logp"] = self._forward(b)[0]
            if self.ref is not None:
                ext["ref_logp"] = self._forward(b, self.ref)[0]
            out.append(ext)
        return out

    def train_step(self, rows: Sequence[TrainRow], version: int) -> Dict[str, float]:
        """The decoupled PPO update on one batch (the same `rows` on every rank).

        No rows (skip_zero_adv_groups left none: every group had equal rewards): no update on
        any rank, since all hold the same empty list; the caller acks and pushes as usual."""
        if not rows:
            return {"n_tokens": 0.0}
        cfg = self.cfg
        plan = self._plan(rows, cfg.mini_batches)
        recompute = cfg.loss.decoupled and cfg.prox_logp == ProxMode.recompute
        # The first mini-batch trains the weights that define the proximal policy, so its
        # proximal log-probs are its own (detached) log-probs: no extra pass for it.
        extras = [self._pre_pass(micro, recompute and k > 0) for k, micro in enumerate(plan)]
        totals: Dict[str, float] = defaultdict(float)
        for k, (micro, ext) in enumerate(zip(plan, extras)):
            now = version + k / len(plan)

            def loss_fn(b, logp, ent, e):
                mask = b["loss_mask"].to(logp.device)
                behav = b["behav_logp"].to(logp.device)
                if not cfg.loss.decoupled:
                    prox = behav
                elif recompute:
                    prox = e["prox_logp"] if "prox_logp" in e else logp.detach()
                else:
                    prox = loglinear_prox_logp(behav, logp, b["versions"].to(logp.device), version, now)
                loss, stats = ppo_token_loss(
                    logp,
                    prox,
                    behav,
                    b["advantages"].to(logp.device),
                    mask,
                    cfg.loss,
                    entropy=ent,
                    ref_logp=e.get("ref_logp"),
                )
                if k == 0:  # the weights of `version`, not yet updated
                    versions = b["versions"].to(logp.device)
                    stats.update(mismatch_sums(logp, behav, mask, versions, version, cfg.loss.behav_weight_cap))
                return loss, stats

            m = self._optimizer_step(micro, loss_fn, ext)
            if k == 0:  # token-means of sums: back to sums, then the mismatch means
                n = m["n_tokens"]
                mismatch = mismatch_metrics({key: m.pop(key) * n for key in MISMATCH_SUMS} | {"n_tokens": n})
            for key, v in m.items():
                totals[key] += v / len(plan)
        return dict(totals) | mismatch

    def sft_step(self, rows: Sequence[TrainRow]) -> Dict[str, float]:
        """Cross-entropy on the masked-in response tokens, token-mean over the batch on all ranks."""
        micro = self._plan(rows, 1)[0]

        def loss_fn(b, logp, ent, e):
            mask = b["loss_mask"].to(logp.device)
            return -logp * mask, {"nll": -logp.detach() * mask, "entropy": ent.detach() * mask}

        return self._optimizer_step(micro, loss_fn, [{}] * len(micro))

    def lr(self) -> float:
        """The rate the next optimiser step will use."""
        return float(self.engine.get_lr()[0])

    # ---- weights out ----
    def named_weights(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """HF-named full tensors in the model's order (ZeRO-3 parameters gathered one by one).

        Every rank must iterate (gathering is collective); only rank 0's values are meant to be used.
        With LoRA, the base's tensors with the adapter merged in.
        """
        import deepspeed

        if self.cfg.lora.enabled:
            yield from lora.merged_tensors(self.engine.module)
            return

        for name, p in self.engine.module.named_parameters():
            if hasattr(p, "ds_id"):
                with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                    yield name, p.detach().clone()
            else:
                yield name, p.detach()

    def adapter_weights(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """The LoRA adapter in PEFT's file names (every rank iterates; ZeRO-3 gathers)."""
        return lora.adapter_tensors(self.engine.module)

    def export_adapter(self, out_dir: str) -> Optional[str]:
        """Write the adapter as a PEFT folder (rank 0; every rank calls)."""
        tensors = {n: t.cpu() for n, t in self.adapter_weights()}
        if self.rank != 0:
            return None
        return lora.save_adapter(out_dir, tensors, lora.adapter_config(self.cfg.lora, self.model_path))

    def export_hf(self, out_dir: str) -> Optional[str]:
        """Save the model in Hugging Face format (safetensors + config + tokenizer files)."""
        state = {n: t.cpu().contiguous() for n, t in self.named_weights()}
        if self.rank != 0:
            return None
        os.makedirs(out_dir, exist_ok=True)
        self.engine.module.save_pretrained(out_dir, state_dict=state, safe_serialization=True)
        for name in TOKENIZER_FILES:
            src = os.path.join(self.model_path, name)
            if os.path.isfile(src) and not os.path.exists(os.path.join(out_dir, name)):
                shutil.copy(src, out_dir)
        return out_dir

    # ---- checkpoints ----
    def save_checkpoint(self, ckpt_dir: str, client_state: dict) -> str:
        tag = f"step{self.global_step}"
        # with LoRA only the adapter and its optimiser state: the frozen base is the model's own
        self.engine.save_checkpoint(
            ckpt_dir,
            tag=tag,
            client_state=dict(client_state, global_step=self.global_step),
            exclude_frozen_parameters=self.cfg.lora.enabled,
        )
        return tag

    def load_checkpoint(self, ckpt_dir: str) -> Optional[dict]:
        """Load the latest checkpoint in `ckpt_dir`; None when there is none."""
        if not os.path.isfile(os.path.join(ckpt_dir, "latest")):
            return None
        path, client = self.engine.load_checkpoint(ckpt_dir, load_module_strict=not self.cfg.lora.enabled)
        if path is None:
            return None
        self.global_step = int(client.get("global_step", 0))
        return client


def list_checkpoint_tags(ckpt_dir: str) -> List[str]:
    return sorted((os.path.basename(p) for p in glob.glob(os.path.join(ckpt_dir, "step*"))), key=lambda t: int(t[4:]))
