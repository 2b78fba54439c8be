"""`BufferStats.from_wire`: the stats answer typed, a missing or mistyped counter named."""

from __future__ import annotations

from dataclasses import fields

import pytest

from areal_mem.buffer.stats import BufferStats

NAMES = [f.name for f in fields(BufferStats) if f.name != "extra"]


def _body(**over):
    body = {name: i for i, name in enumerate(NAMES)}
    body.update(over)
    return body


def test_every_counter_is_read_by_name_and_new_ones_are_kept_apart():
    stats = BufferStats.from_wire(_body(refused_version=7))
    assert [getattr(stats, n) for n in NAMES] == list(range(len(NAMES)))
    assert stats.extra == {"refused_version": 7}


@pytest.mark.parametrize("bad", [None, "3", 2.0, True])
def test_a_missing_or_mistyped_counter_is_named(bad):
    body = _body(capacity=bad) if bad is not None else {k: v for k, v in _body().items() if k != "capacity"}
    with pytest.raises(ValueError, match="`capacity` must be an integer"):
        BufferStats.from_wire(body)
