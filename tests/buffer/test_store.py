"""Recovery of the durable store from what a crash can leave behind."""

from __future__ import annotations

import os

import pytest

from areal_mem.buffer.schema import group_to_table
from areal_mem.buffer.server.store import GroupStore

from .conftest import make_group


def test_recovery_keeps_pending_and_cleans_up(tmp_path):
    store = GroupStore(str(tmp_path))
    entries = [store.write(i, f"g{i}", group_to_table(make_group(f"g{i}", start_version=i))) for i in range(4)]
    store.record_done("ack", entries[:1], batch_id="b")
    store.record_version(7, 1)
    store.close()
    # a crash: a put cut short, a dropped group whose file was not yet deleted, a torn append
    whole = open(entries[3].path, "rb").read()
    open(os.path.join(store.groups_dir, "000000000009.arrow"), "wb").write(whole[:-100])
    with open(store.ledger_path, "a") as f:
        f.write('{"drop": ["g1"]}\n{"ack": ["g2"')
    again = GroupStore(str(tmp_path))
    rec = again.recover()
    # g2's ack was torn, so never confirmed to the learner: g2 is served again
    assert [(e.seq, e.group_id, e.start_version) for e in rec.pending] == [(2, "g2", 2), (3, "g3", 3)]
    assert rec.done_ids == {"g0", "g1"} and rec.acked == 1
    assert (rec.version, rec.next_seq, rec.acked_batches, rec.clock) == (7, 4, 1, 1)
    assert sorted(os.listdir(store.groups_dir)) == ["000000000002.arrow", "000000000003.arrow"]
    assert GroupStore.read(rec.pending[1]).equals(group_to_table(make_group("g3", start_version=3)))
    again.record_version(8, 2)  # appends after the torn tail was cut off stay readable
    again.close()
    assert (lambda r: (r.version, r.clock))(GroupStore(str(tmp_path)).recover()) == (8, 2)


def test_a_corrupt_ledger_line_is_an_error_naming_the_line(tmp_path):
    store = GroupStore(str(tmp_path))
    store.close()
    with open(store.ledger_path, "w") as f:
        f.write('{"version": 1}\n{oops\n{"version": 2}\n')
    with pytest.raises(ValueError, match=r"ledger.jsonl:2: corrupt ledger record"):
        store.recover()


def test_one_service_per_run_dir(tmp_path):
    first = GroupStore(str(tmp_path))
    with pytest.raises(ValueError, match="in use by another buffer service"):
        GroupStore(str(tmp_path))
    first.close()
    GroupStore(str(tmp_path)).close()
