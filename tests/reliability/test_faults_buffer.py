"""The buffer over a days-long run: an ack that crosses a restart, bounded id sets, a compacted
ledger; and the launcher's report of a stale torch-extension build lock."""

import json
import os
import time

import pytest

from areal_mem.app.launch.local import check_extension_locks
from areal_mem.buffer.schema import group_to_table
from areal_mem.buffer.server.service import BufferService
from areal_mem.buffer.server.store import GroupStore
from areal_mem.config.buffer import BufferConfig
from areal_mem.net import free_port
from tests.buffer.conftest import make_group


def test_a_batch_trained_across_a_buffer_restart_is_acked_once(tmp_path):
    from areal_mem.buffer.server.launch import BufferProcess

    port = free_port()
    buf = BufferProcess(str(tmp_path / "run"), port=port)
    client = buf.client(retry_window_s=60)
    try:
        for i in range(4):
            assert client.put_group(make_group(f"g{i}", seed=i))
        batch = client.get_batch(2, timeout_s=5)  # the learner trains it...
        buf.kill()  # ...while the buffer dies; the launcher restarts it on the same port
        buf = BufferProcess(str(tmp_path / "run"), port=port)
        assert client.ack(batch.batch_id) == 2  # the restart re-queued it: acked by its group ids
        assert client.put_group(make_group("g0")) is False  # still refused after the restart
        assert client.get_batch(2, timeout_s=5).group_ids == ["g2", "g3"]  # g0, g1 never again
    finally:
        client.close()
        buf.kill()


def test_done_ids_past_the_staleness_horizon_are_forgotten(tmp_path):
    from areal_mem.buffer.client import BufferClient, BufferRefusedError

    svc = BufferService(
        str(tmp_path), BufferConfig(max_staleness=1, batch_groups=2, max_running_groups=4, fsync=False, slot_ttl_s=0)
    )
    client = BufferClient(svc.url)
    try:
        for gid, start in (("old", 1), ("new", 2)):
            client.put_group(make_group(gid, start_version=start))
        client.set_version(2)
        client.ack(client.get_batch(2, timeout_s=5).batch_id)
        assert set(svc._done_ids) == {"old", "new"} and not client.put_group(make_group("old"))
        client.set_version(3)  # horizon 2: "old" (started at 1) could only come back stale
        assert set(svc._done_ids) == {"new"}
        with pytest.raises(BufferRefusedError, match="'old' refused, nothing stored") as e:
            client.put_group(make_group("old", start_version=1))  # a late retry: refused as stale
        assert e.value.code == "stale" and client.stats().pending_groups == 0
        assert not client.put_group(make_group("new", start_version=2))
    finally:
        client.close()
        svc.shutdown()


def test_recovery_forgets_old_records_and_compacts_the_ledger(tmp_path, monkeypatch):
    monkeypatch.setattr(GroupStore, "compact_min_records", 2)
    store = GroupStore(str(tmp_path))
    groups = [store.write(i, f"g{i}", group_to_table(make_group(f"g{i}", start_version=i))) for i in range(4)]
    for e in groups[:3]:
        store.record_done("ack", [e], batch_id=f"b{e.seq}")
    store.record_version(4, 3)
    store.close()
    time.sleep(0.1)  # the deleter thread finished
    rec = GroupStore(str(tmp_path)).recover(max_staleness=2)  # horizon 2: g0, g1 forgotten
    assert rec.done_ids == {"g2"} and (rec.acked, rec.acked_batches, rec.version, rec.clock) == (3, 3, 4, 3)
    assert [e.group_id for e in rec.pending] == ["g3"]
    with open(tmp_path / "ledger.jsonl") as f:
        lines = [json.loads(line) for line in f]
    assert lines == [
        {"version": 4, "acked_total": 2, "acked_batches_total": 2, "clock": 3},
        {"ack": ["g2"], "start": 2, "batch_id": "b2"},
    ]
    assert (lambda r: (r.acked, r.acked_batches, r.clock))(GroupStore(str(tmp_path)).recover()) == (3, 3, 3)


def test_a_stale_extension_lock_is_reported_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    check_extension_locks(0.0)  # no lock: nothing to wait for
    lock = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=f"{lock}.*delete it"):
        check_extension_locks(0.5)
    assert time.monotonic() - t0 >= 0.5 and os.path.exists(lock)  # reported, never deleted
