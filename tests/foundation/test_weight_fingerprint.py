"""The weight fingerprint is exact (equal to its definition in Python integers), independent of
how the tensor is laid out or chunked, follows a cast exactly, and changes when one element
changes or two are swapped."""

from __future__ import annotations

import pytest
import torch

from areal_mem import weight_fingerprint as wf
from areal_mem.weight_fingerprint import fingerprint, fingerprints, served_dtype


def by_definition(t: torch.Tensor) -> str:
    """s0 = sum(x_i), s1 = sum((i + 1) x_i) mod P over the raw bits x_i, in Python integers."""
    bits = t.contiguous().view(-1).view({2: torch.int16, 4: torch.int32}[t.element_size()]).tolist()
    s0 = sum(bits)
    s1 = sum((i + 1) * x for i, x in enumerate(bits)) % wf.P
    return f"{str(t.dtype).removeprefix('torch.')}:{s0 & (2**64 - 1):016x}{s1:08x}"


@pytest.mark.parametrize("n", [0, 1, 1023, 1024, 1025, 3 * 1024 * 256 + 17])
def test_equals_its_definition_whatever_the_size(n):
    g = torch.Generator().manual_seed(n)
    t = torch.randn(n, generator=g) * 100
    assert fingerprint(t) == by_definition(t)
    assert fingerprint(t, torch.bfloat16) == by_definition(t.to(torch.bfloat16))


def test_many_tensors_at_once_equal_each_alone():
    g = torch.Generator().manual_seed(4)
    named = [(f"t{i}", torch.randn(n, generator=g)) for i, n in enumerate([5000, 0, 1024, 3, 300000, 1])]
    named.append(("half", torch.randn(2049, generator=g).half()))
    assert fingerprints(named) == {n: by_definition(t) for n, t in named}


def test_same_weights_same_fingerprint_however_laid_out_or_chunked(monkeypatch):
    t = torch.randn(700, 900, generator=torch.Generator().manual_seed(1))
    first = fingerprint(t)
    assert fingerprint(t) == first == fingerprint(t.clone())
    assert fingerprint(t.t().contiguous().t()) == first  # a non-contiguous view of the same values
    monkeypatch.setitem(wf.CHUNK_ROWS, "cpu", 3)  # other chunk boundaries, other summation order
    assert fingerprint(t) == first


def test_a_cast_round_trip_keeps_the_fingerprint_in_the_served_dtype():
    t = torch.randn(333, 77, generator=torch.Generator().manual_seed(2))
    served = t.to(torch.bfloat16)  # what a bf16 generator holds after loading the fp32 push
    fp = fingerprint(served)
    assert fp.startswith("bfloat16:")
    assert fingerprint(t, torch.bfloat16) == fp  # the learner casts its fp32 copy before hashing
    assert fingerprint(served.float(), torch.bfloat16) == fp  # bf16 -> fp32 -> bf16 is exact
    assert fingerprint(t) != fingerprint(served.float())  # fp32 values that bf16 rounded away


def test_one_changed_element_or_two_swapped_change_it():
    t = torch.randn(64, 1000, generator=torch.Generator().manual_seed(3))
    fp = fingerprint(t)
    one = t.clone()
    one[40, 7] = torch.nextafter(one[40, 7], torch.tensor(float("inf")))  # the last bit of one element
    assert fingerprint(one) != fp
    swapped = t.clone()
    swapped[0, 1], swapped[63, 999] = t[63, 999], t[0, 1]
    assert fingerprint(swapped)[:24] == fp[:24]  # the plain sum cannot see a swap ...
    assert fingerprint(swapped) != fp  # ... the position-weighted one does
    neighbours = t.clone()
    neighbours[5, 0], neighbours[5, 1] = t[5, 1], t[5, 0]
    assert fingerprint(neighbours) != fp
    bf = t.to(torch.bfloat16)
    bf_swapped = bf.clone()
    bf_swapped[2, 3], bf_swapped[9, 9] = bf[9, 9], bf[2, 3]
    assert fingerprint(bf_swapped) != fingerprint(bf)


def test_names_dtypes_and_refusals():
    a, b = torch.ones(3), torch.zeros(4, dtype=torch.float16)
    out = fingerprints([("a", a), ("b", b)], {"a": torch.bfloat16})
    assert list(out) == ["a", "b"] and out["a"] == fingerprint(a, torch.bfloat16) and out["b"].startswith("float16:")
    assert served_dtype(out["a"]) == torch.bfloat16 and served_dtype(out["b"]) == torch.float16
    with pytest.raises(ValueError, match="is not an areal-mem weight fingerprint"):
        served_dtype("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")  # SGLang's sha256
    with pytest.raises(ValueError, match="unknown dtype 'float99'"):
        served_dtype("float99:" + "0" * 24)
    with pytest.raises(ValueError, match="cannot fingerprint torch.float64 tensors"):
        fingerprint(torch.ones(2, dtype=torch.float64))
