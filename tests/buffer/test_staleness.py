"""AReaL's admission formula and drop rule, with exact numbers."""
from __future__ import annotations

import pytest

from areal_mem.staleness import StalenessManager


@pytest.mark.parametrize("eta, batch, max_running, version, accepted, running, expected", [
    (0, 4, 100, 0, 0, 0, 4),  # synchronous: one batch of groups per version
    (0, 4, 100, 0, 4, 0, 0),
    (0, 4, 100, 1, 4, 0, 4),
    (0, 4, 100, 1, 2, 2, 4),
    (2, 4, 100, 0, 0, 0, 12),  # eta batches ahead
    (2, 4, 100, 3, 10, 5, 9),  # (2+3+1)*4 - 15
    (2, 4, 6, 3, 10, 5, 1),  # max_running binds
    (1, 8, 100, 0, 20, 0, -4),
])
def test_capacity(eta, batch, max_running, version, accepted, running, expected):
    m = StalenessManager(eta, batch, max_running, version=version, accepted=accepted,
                         running=running)
    assert m.capacity() == expected


def test_acquire_accept_release_cycle_with_eta_zero_is_synchronous():
    m = StalenessManager(max_staleness=0, batch_groups=2, max_running=10)
    assert [m.try_acquire() for _ in range(3)] == [True, True, False]
    m.on_accepted(held_slot=True)
    m.release()  # the second group failed
    assert (m.accepted, m.running, m.capacity()) == (1, 0, 1)
    assert m.try_acquire() and not m.try_acquire()
    m.on_accepted(held_slot=True)
    assert m.capacity() == 0
    m.version = 1
    assert m.capacity() == 2
    m.on_dropped(1)  # a dropped group frees its place
    assert m.capacity() == 3


@pytest.mark.parametrize("eta, version, start, stale", [
    (0, 0, 0, False), (0, 1, 0, True), (2, 5, 3, False), (2, 5, 2, True), (4, 3, 0, False)])
def test_drop_rule(eta, version, start, stale):
    assert StalenessManager(eta, 1, 1, version=version).is_stale(start) is stale


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="max_staleness >= 0"):
        StalenessManager(-1, 4, 4)
