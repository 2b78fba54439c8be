"""The output head's chunked log-probs and entropies (learner/head.py) against the plain way:
the whole logits tensor through `token_logp_entropy` and autograd."""

import copy

import pytest
import torch

from areal_mem.learner import head
from areal_mem.learner.loss import token_logp_entropy


def _linear(vocab, hidden, bias):
    torch.manual_seed(0)
    lin = torch.nn.Linear(hidden, vocab, bias=bias)
    with torch.no_grad():
        lin.weight.mul_(10.0)  # peaked distributions: log-probs from about -15 to 0
    return lin


def _both(lin, h, labels, temperature, g_logp, g_ent, chunk_logits):
    """(logp, entropy, d hidden, d weight, d bias) by the plain way in float64 (the reference: in
    float32 it is the less exact of the two) and by the chunked head in float32."""
    out = []
    for way in ("plain", "chunked"):
        if way == "plain":
            model, x = copy.deepcopy(lin).double(), h.double().requires_grad_()
            logp, ent = token_logp_entropy(model(x), labels, temperature)
        else:
            model, x = lin, h.clone().requires_grad_()
            logp, ent = head.head_logp_entropy(model, x, labels, temperature, chunk_logits)
        loss = 0.0
        if g_logp is not None:
            loss = loss + (logp * g_logp).sum()
        if g_ent is not None:
            loss = loss + (ent * g_ent).sum()
        loss.backward()
        bias = None if model.bias is None else model.bias.grad
        grads = (logp.detach(), ent.detach(), x.grad, model.weight.grad, bias)
        out.append(tuple(None if t is None else t.float() for t in grads))
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("uses", ["both", "logp", "entropy"])
def test_chunked_head_equals_the_plain_logits_and_autograd(temperature, bias, uses):
    vocab, hidden, n = 50, 8, 23
    lin = _linear(vocab, hidden, bias)
    h = torch.randn(n, hidden)
    labels = torch.randint(0, vocab, (n,))
    g_logp = torch.randn(n) if uses in ("both", "logp") else None
    g_ent = torch.randn(n) if uses in ("both", "entropy") else None
    # 5 positions a chunk: four whole chunks and a part one
    plain, chunked = _both(lin, h, labels, temperature, g_logp, g_ent, chunk_logits=5 * vocab)
    assert head.chunk_rows(vocab, h.device, 5 * vocab) == 5
    assert plain[0].min() < -5  # the test's distributions are not flat
    for name, want, got in zip(("logp", "entropy", "d hidden", "d weight", "d bias"), plain, chunked):
        if want is None:
            assert got is None
            continue
        # float32 rounding against the float64 reference, relative to the largest value: values
        # within 1e-5; gradients within 1e-4 (the entropy's gradient of peaked distributions is
        # off by up to 2e-5 by the plain way in float32 as well, 4e-5 by this one, over 20 seeds)
        tol = (1e-5 if name in ("logp", "entropy") else 1e-4) * max(float(want.abs().max()), 1.0)
        torch.testing.assert_close(got, want, atol=tol, rtol=0.0, msg=name)
        assert got.abs().max() > 0, name


def test_no_grad_and_empty_input():
    lin = _linear(50, 8, False)
    with torch.no_grad():
        logp, ent = head.head_logp_entropy(lin, torch.randn(4, 8), torch.tensor([1, 2, 3, 4]))
    assert logp.shape == ent.shape == (4,) and not logp.requires_grad
    x = torch.zeros(0, 8, requires_grad=True)
    logp, ent = head.head_logp_entropy(lin, x, torch.zeros(0, dtype=torch.long))
    (logp.sum() + ent.sum()).backward()
    assert x.grad.shape == (0, 8) and (lin.weight.grad == 0).all()


def test_default_chunks_by_device_and_refusal_of_other_heads():
    assert head.chunk_rows(6144, torch.device("cpu")) == head.CPU_CHUNK_LOGITS // 6144
    assert head.chunk_rows(152064, torch.device("cuda")) == head.ACCELERATOR_CHUNK_LOGITS // 152064
    assert head.chunk_rows(10**9, torch.device("cpu")) == 1
    with pytest.raises(TypeError, match="linear output head"):
        head.install(torch.nn.Sequential())


CHUNK = 5 * 50  # logits a chunk: 5 positions of the 50-word heads below


def _case(bias):
    """A head, its inputs and output gradients, and the float64 plain way's values and gradients."""
    vocab, hidden, n = 50, 8, 23
    lin = _linear(vocab, hidden, bias)
    h = torch.randn(n, hidden)
    labels = torch.randint(0, vocab, (n,))
    g_logp, g_ent = torch.randn(n), torch.randn(n)
    plain, _ = _both(lin, h, labels, 1.0, g_logp, g_ent, chunk_logits=CHUNK)
    return lin, h, labels, g_logp, g_ent, plain


def test_bfloat16_head_returns_float32_values_and_bfloat16_gradients():
    """A bf16 model (the GPU recipes): logits in fp32 as the plain way casts them, gradients in
    the parameters' dtype, close to the float64 reference within bf16 rounding."""
    lin, h, labels, g_logp, g_ent, plain = _case(bias=False)
    low = copy.deepcopy(lin).bfloat16()
    x = h.bfloat16().requires_grad_()
    logp, ent = head.head_logp_entropy(low, x, labels, 1.0, CHUNK)
    assert logp.dtype == ent.dtype == torch.float32
    ((logp * g_logp).sum() + (ent * g_ent).sum()).backward()
    assert x.grad.dtype == low.weight.grad.dtype == torch.bfloat16
    for name, want, got in zip(("d hidden", "d weight"), plain[2:4], (x.grad, low.weight.grad)):
        # inputs rounded to bf16 (8 bits of mantissa): over 10 seeds both this and the plain way on
        # the same bf16 module are off the float64 reference by up to 0.65% of the largest value
        torch.testing.assert_close(got.float(), want, atol=0.02 * float(want.abs().max()), rtol=0.0, msg=name)


def test_a_frozen_head_passes_gradient_to_the_hidden_states_only():
    lin, h, labels, g_logp, g_ent, plain = _case(bias=True)
    lin.requires_grad_(False)
    lin.zero_grad(set_to_none=True)
    x = h.clone().requires_grad_()
    logp, ent = head.head_logp_entropy(lin, x, labels, 1.0, CHUNK)
    ((logp * g_logp).sum() + (ent * g_ent).sum()).backward()
    assert lin.weight.grad is None and lin.bias.grad is None
    torch.testing.assert_close(x.grad, plain[2], atol=1e-4 * float(plain[2].abs().max()), rtol=0.0)
