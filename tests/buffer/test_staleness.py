"""AReaL's admission formula and drop rule, with exact numbers."""

from __future__ import annotations

import pytest

from areal_mem.staleness import StalenessManager


@pytest.mark.parametrize(
    "eta, batch, max_running, version, accepted, running, expected",
    [
        (0, 4, 100, 0, 0, 0, 4),  # synchronous: one batch of groups per version
        (0, 4, 100, 0, 4, 0, 0),
        (0, 4, 100, 1, 4, 0, 4),
        (0, 4, 100, 1, 2, 2, 4),
        (2, 4, 100, 0, 0, 0, 12),  # eta batches ahead
        (2, 4, 100, 3, 10, 5, 9),  # (2+3+1)*4 - 15
        (2, 4, 6, 3, 10, 5, 1),  # max_running binds
        (1, 8, 100, 0, 20, 0, -4),
    ],
)
def test_capacity(eta, batch, max_running, version, accepted, running, expected):
    m = StalenessManager(eta, batch, max_running, version=version, accepted=accepted, running=running)
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
    m.on_trained()  # the learner acked the batch...
    assert m.capacity() == 0
    m.set_version(1)  # ...and pushed
    assert m.capacity() == 2
    m.on_dropped(1)  # a dropped group frees its place
    assert m.capacity() == 3


def test_a_push_without_a_trained_batch_does_not_advance_admission():
    """A learner restart pushes its restored weights under a fresh version: with the version as
    the clock, rollouts would run one batch further ahead per restart (all dropped as stale)."""
    eta, B = 1, 2
    m = StalenessManager(max_staleness=eta, batch_groups=B, max_running=100)
    for version in (1, 2):  # two steps: a batch accepted, trained (acked), then pushed
        m.accepted += B
        m.on_trained()
        m.set_version(version)
    assert (m.clock, m.capacity()) == (2, (eta + 2 + 1) * B - 2 * B)
    m.set_version(3)  # the restarted learner's push: no batch trained since
    assert (m.version, m.clock, m.capacity()) == (3, 2, 2 * B)  # unchanged
    m.accepted += 2 * B
    m.on_trained()
    assert m.capacity() == 0  # the ack alone moves nothing
    m.set_version(4)
    assert (m.clock, m.capacity()) == (3, B)
    # Those B groups start at version 4 and are the 5th batch: 3 batches are trained, the 4th
    # trains at version 4, the 5th at version 5 = 4 + eta: never stale. With the version as
    # the clock the capacity would be 2 B, and the last B groups would train at 6 (stale).


def test_the_clock_never_goes_back():
    m = StalenessManager(0, 1, 1, version=5)  # e.g. an old ledger without a recorded clock
    m.set_version(6)
    assert m.clock == 5


@pytest.mark.parametrize(
    "eta, version, start, stale",
    [(0, 0, 0, False), (0, 1, 0, True), (2, 5, 3, False), (2, 5, 2, True), (4, 3, 0, False)],
)
def test_drop_rule(eta, version, start, stale):
    assert StalenessManager(eta, 1, 1, version=version).is_stale(start) is stale


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="max_staleness >= 0"):
        StalenessManager(-1, 4, 4)
