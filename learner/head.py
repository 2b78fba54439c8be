"""The output head's log-prob of each label and entropy of each position, a chunk of positions at a time.

The plain way (`loss.token_logp_entropy` over `head(hidden)`) holds the logits of every trained
position at once and lets autograd keep each intermediate of the log-softmax and the entropy for
backward: at the debug recipe's ~3,000 trained tokens and 6,144 words, 74 MB per tensor and
about ten passes over such tensors, which on a CPU stream through memory rather than cache
(forward + backward of the head 0.43 s on one core, 0.14 s of it its matrix products); on a GPU
with a 152k vocabulary the same tensors take several GB. Here one autograd function computes, for
a chunk of positions, the logits, their log-sum-exp, the label's log-prob and the entropy, and
keeps only the hidden states and two floats a position; backward computes each chunk's logits
again and its gradient in closed form:

    d logp_label / d z_j = [j == label] - p_j
    d entropy    / d z_j = -p_j (log p_j + entropy)

so a chunk's work stays in cache (0.16 s for the same head on one core: four matrix products
instead of three, far fewer passes over memory; `benchmarks/bench_learner.py`). Values equal the
plain way's within float rounding.

Called as the head module's own forward (`install`), so that ZeRO-3's module hooks gather its
weight for the forward and again for the backward, as they do for a plain linear layer.
"""

from __future__ import annotations

from types import MethodType
from typing import Optional, Tuple

import torch
from torch.autograd.function import once_differentiable

# Logits per chunk: 2M floats (8 MB in fp32) on a CPU, 341 positions at the debug recipe's 6,144
# words (for 3,000 positions on one core of the Intel VM: chunks of 64-256 positions 160-167 ms,
# of 341 158 ms, of 1,024 195 ms); on an accelerator enough to keep each kernel large (about 220
# positions a chunk at a 152k vocabulary).
CPU_CHUNK_LOGITS = 2**21
ACCELERATOR_CHUNK_LOGITS = 2**25


class _ChunkedLogpEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature: float, rows: int):
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        entropy, logz = torch.empty_like(logp), torch.empty_like(logp)
        for s in range(0, n, rows):
            z = _logits(hidden[s : s + rows], weight, bias, temperature)
            lz = torch.logsumexp(z, dim=-1)
            logp[s : s + rows] = z.gather(-1, labels[s : s + rows, None]).squeeze(-1) - lz
            z.sub_(lz[:, None])  # log p
            entropy[s : s + rows] = -(z.exp() * z).sum(-1)
            logz[s : s + rows] = lz
        ctx.save_for_backward(hidden, weight, bias, labels, logz, entropy)
        ctx.temperature, ctx.rows = temperature, rows
        ctx.set_materialize_grads(False)
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, g_logp, g_entropy):
        # Without materialized gradients an output the loss leaves out comes as None and costs
        # nothing (autograd calls this only when at least one of the two is used).
        hidden, weight, bias, labels, logz, entropy = ctx.saved_tensors
        rows, temperature = ctx.rows, ctx.temperature
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        d_hidden = torch.empty_like(hidden) if need_h else None
        # fp32 sums over the chunks: a bf16 head's gradient is rounded once, at the end (for a
        # 152k x 3,584 head that sum is 2.2 GB, against 5 GB for one fp32 logits tensor of 8k tokens)
        d_weight = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        d_bias = torch.zeros_like(bias, dtype=torch.float32) if need_b else None
        for s in range(0, hidden.shape[0], rows):
            e = s + rows
            z = _logits(hidden[s:e], weight, bias, temperature).sub_(logz[s:e, None])  # log p
            p = z.exp()
            # dz = g_logp ([j == label] - p) - g_entropy p (log p + entropy), built in place in z
            if g_entropy is None:
                z.zero_()
            else:
                z.add_(entropy[s:e, None]).mul_(g_entropy[s:e, None])
            if g_logp is not None:
                z.add_(g_logp[s:e, None])
            z.mul_(p).neg_()
            if g_logp is not None:
                z.scatter_add_(-1, labels[s:e, None], g_logp[s:e, None])
            if temperature != 1.0:
                z.div_(temperature)
            if d_hidden is not None:
                d_hidden[s:e] = z.to(hidden.dtype) @ weight
            if d_weight is not None:
                d_weight.addmm_(z.t(), hidden[s:e].float())
            if need_b:
                d_bias += z.sum(0)
        return (
            d_hidden,
            None if d_weight is None else d_weight.to(weight.dtype),
            None if d_bias is None else d_bias.to(bias.dtype),
            None,
            None,
            None,
        )


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], temperature: float):
    """One chunk's logits in fp32 (a bf16 model's head output is cast, as the plain way casts it)."""
    z = torch.nn.functional.linear(hidden, weight, bias).float()
    return z.div_(temperature) if temperature != 1.0 else z


def chunk_rows(vocab: int, device: torch.device, chunk_logits: int = 0) -> int:
    """Positions per chunk: `chunk_logits` floats of logits (0: the device's default) over the vocabulary."""
    budget = chunk_logits or (CPU_CHUNK_LOGITS if device.type == "cpu" else ACCELERATOR_CHUNK_LOGITS)
    return max(1, budget // max(1, vocab))


def head_logp_entropy(
    self: torch.nn.Linear, hidden: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, chunk_logits: int = 0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The forward `install` gives a linear output head: hidden [n, H] and labels [n] -> the
    labels' log-probs and the entropies [n] (fp32) of softmax(head(hidden) / temperature)."""
    rows = chunk_rows(self.weight.shape[0], hidden.device, chunk_logits)
    return _ChunkedLogpEntropy.apply(hidden, self.weight, self.bias, labels, temperature, rows)


def install(head: torch.nn.Module) -> None:
    """Make a model's linear output head compute log-probs and entropies instead of logits."""
    if not isinstance(head, torch.nn.Linear):
        raise TypeError(f"the learner needs a linear output head; this model's is {type(head).__name__}")
    head.forward = MethodType(head_logp_entropy, head)  # type: ignore[method-assign]  # this module's one patch
