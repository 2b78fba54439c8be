"""Recovery of the durable store from what a crash can leave behind."""
from __future__ import annotations

import os

import pytest

from areal_mem.buffer.schema import group_to_table
from areal_mem.buffer.store import GroupStore

from .conftest import make_group


def test_recovery_keeps_pending_and_cleans_up(tmp_path):
    store = GroupStore(str(tmp_path))
    entries = [store.write(i, f"g{i}", group_to_table(make_group(f"g{i}", start_version=i)))
               for i in range(4)]
    store.record_done("ack", entries[:1], batch_id="b")
    store.record_version(7)
    store._deleter.shutdown(wait=True)
    # a crash: a put mid-write, a dropped group whose file was not yet deleted, a torn append
    open(os.path.join(store.groups_dir, ".tmp-000000000009.arrow"), "wb").write(b"ARROW1\0")
    with open(store.ledger_path, "a") as f:
        f.write('{"drop": ["g1"]}\n{"ack": ["g2"')
    rec = GroupStore(str(tmp_path)).recover()
    # g2's ack was torn, so never confirmed to the learner: g2 is served again
    assert [(e.seq, e.group_id, e.start_version) for e in rec.pending] == [(2, "g2", 2),
                                                                         (3, "g3", 3)]
    assert rec.done_ids == {"g0", "g1"} and rec.acked == 1
    assert (rec.version, rec.next_seq) == (7, 4)
    assert sorted(os.listdir(store.groups_dir)) == ["000000000002.arrow", "000000000003.arrow"]
    assert GroupStore.read(rec.pending[1]).equals(group_to_table(make_group("g3", start_version=3)))
    store.record_version(8)  # appends after the torn tail was cut off stay readable
    assert GroupStore(str(tmp_path)).recover().version == 8


def test_a_corrupt_ledger_line_is_an_error_naming_the_line(tmp_path):
    store = GroupStore(str(tmp_path))
    with open(store.ledger_path, "w") as f:
        f.write('{"version": 1}\n{oops\n{"version": 2}\n')
    with pytest.raises(ValueError, match=r"ledger.jsonl:2: corrupt ledger record"):
        store.recover()
