"""The buffer service as a real process on 127.0.0.1, through the real client."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest

from areal_mem.buffer import BufferRefusedError, group_to_table
from areal_mem.buffer.schema import concat_groups
from areal_mem.buffer.server.service import BufferService
from areal_mem.config.buffer import BufferConfig
from areal_mem.net import free_port
from areal_mem.security import InsecureBindError

from .conftest import make_group


def test_groups_round_trip_bit_for_bit(serve):
    buf = serve(overrides=["buffer.max_memory_groups=2"])  # 2 from memory, 3 read back from disk
    client = buf.client()
    groups = [make_group(f"g{i}", n_traj=5, n_ctx=4, tokens=300, seed=i) for i in range(5)]
    for g in groups:
        assert client.put_group(g) is True
    assert client.stats().in_memory_groups == 2
    batch = client.get_batch(5, timeout_s=10)
    assert batch.group_ids == [g.group_id for g in groups]  # oldest first
    assert batch.table.equals(concat_groups([group_to_table(g) for g in groups]))
    assert batch.groups == groups
    assert (batch.dropped_stale, batch.version) == (0, 0)


def test_capacity_rule_through_the_service(serve):
    buf = serve(overrides=["buffer.max_staleness=0", "buffer.batch_groups=2", "buffer.max_running_groups=100"])
    client = buf.client()
    slots = [client.acquire() for _ in range(3)]
    assert all(slots[:2]) and slots[2] == ""  # eta = 0: one batch per version
    assert client.put_group(make_group("a"), slot=slots[0])
    assert client.release(slots[1]) is True and client.release(slots[1]) is False
    assert client.stats().capacity == 1
    second = client.acquire()
    client.put_group(make_group("b"), slot=second)
    assert client.acquire() == "" and client.stats().capacity == 0
    client.ack(client.get_batch(2, timeout_s=5).batch_id)  # the learner trains, then pushes
    assert client.set_version(1) == {"version": 1, "dropped_stale": 0}
    assert client.stats().capacity == 2
    assert client.acquire_slot()[1] == 1  # the version a new group starts at


def test_capacity_with_eta_two_and_max_running(serve):
    buf = serve(overrides=["buffer.max_staleness=2", "buffer.batch_groups=3", "buffer.max_running_groups=4"])
    client = buf.client()
    assert client.stats().capacity == 4  # min(4 - 0, 3 * 3 - 0)
    slots = [client.acquire() for _ in range(5)]
    assert sum(bool(s) for s in slots) == 4
    for i, s in enumerate(slots[:4]):
        client.put_group(make_group(f"g{i}"), slot=s)
    assert client.stats().capacity == 4  # min(4, 9 - 4)
    for i in range(4, 8):
        client.put_group(make_group(f"g{i}"))  # puts without a slot count too
    assert client.stats().capacity == 1  # 9 - 8
    client.set_version(1)  # a push that trained no batch (a restarted learner's): no more room
    assert (client.stats().clock, client.stats().capacity) == (0, 1)
    client.ack(client.get_batch(3, timeout_s=5).batch_id)
    assert client.stats().capacity == 1  # the clock moves with the next version
    client.set_version(2)
    assert (client.stats().clock, client.stats().capacity) == (1, 4)  # min(4, 12 - 8)


def test_acquire_waits_for_a_version_bump(serve):
    buf = serve(overrides=["buffer.max_staleness=0", "buffer.batch_groups=1"])
    client = buf.client()
    client.put_group(make_group("a"))

    def train_and_push():
        learner = buf.client()
        learner.ack(learner.get_batch(1, timeout_s=5).batch_id)
        learner.set_version(1)

    bump = threading.Timer(0.5, train_and_push)
    bump.start()
    assert client.acquire(wait_s=10) != ""
    bump.join()


def test_a_batch_takes_the_groups_that_started_earliest_first(serve):
    """A slow group accepted after younger ones (they overtook it) is trained first, before the
    next push makes it stale; equal start versions keep their acceptance order."""
    buf = serve(overrides=["buffer.max_staleness=1"])
    client = buf.client()
    for gid, start in (("young-a", 2), ("young-b", 2), ("slow", 1), ("young-c", 2)):
        client.put_group(make_group(gid, start_version=start))
    client.set_version(2)
    assert client.get_batch(2, timeout_s=10).group_ids == ["slow", "young-a"]
    assert client.get_batch(2, timeout_s=10).group_ids == ["young-b", "young-c"]


def test_stale_groups_are_dropped_and_counted(serve):
    buf = serve(overrides=["buffer.max_staleness=1"])
    client = buf.client()
    for v in (0, 1, 2):
        client.put_group(make_group(f"v{v}", start_version=v))
    assert client.set_version(2) == {"version": 2, "dropped_stale": 1}  # 0 < 2 - 1
    with pytest.raises(BufferRefusedError, match="'late' refused, nothing stored: it started at version 0") as e:
        client.put_group(make_group("late", start_version=0))  # stale on arrival: never stored
    assert e.value.code == "stale"
    batch = client.get_batch(2, timeout_s=10)
    assert batch.group_ids == ["v1", "v2"] and batch.dropped_stale == 0
    stats = client.stats()
    assert (stats.dropped_stale, stats.pending_groups, stats.accepted) == (2, 0, 2)
    assert client.put_group(make_group("v0")) is False  # a dropped group stays refused
    with pytest.raises(TimeoutError):
        client.get_batch(1, timeout_s=0.5)


def test_invalid_puts_are_refused_and_nothing_is_stored(serve, tmp_path):
    buf = serve()
    client = buf.client()
    good = group_to_table(make_group("g"))
    wrong_type = good.set_column(7, "behav_logp", pc.cast(good.column("behav_logp"), pa.list_(pa.float64())))
    short_mask = good.set_column(6, "loss_mask", pa.array([[1]] * good.num_rows, pa.list_(pa.int8())))
    for table, reason in [
        (wrong_type, "expected list<item: float>"),
        (short_mask, "row 0 (trajectory 'g/0', turn 0), field 'loss_mask': 1 entries"),
        (good, "rows carry group_id 'g' but the put names 'other'"),
    ]:
        with pytest.raises(BufferRefusedError) as e:
            client.put_table(table, "other" if table is good else "g")
        assert e.value.code == "invalid" and reason in str(e.value)
    stats = client.stats()
    assert (stats.groups_put, stats.pending_groups, stats.refused_invalid) == (0, 0, 3)
    assert os.listdir(tmp_path / "run" / "buffer" / "groups") == []
    assert client.put_table(good, "g") is True  # the id was not burnt by the refusals


def test_a_put_over_the_size_limit_is_refused_and_the_service_stays_up(serve, tmp_path):
    buf = serve(overrides=["buffer.max_group_mb=0.003"])  # 3,145 bytes
    client = buf.client()
    big, small = group_to_table(make_group("big", n_traj=6)), group_to_table(make_group("small"))
    assert small.nbytes < 3_145 < big.nbytes == 5_021
    with pytest.raises(BufferRefusedError) as e:
        client.put_table(big, "big")
    assert e.value.code == "invalid" and "passed 5021 bytes, over the limit of 3145 bytes (buffer.max_group_mb)" in str(
        e.value
    )
    one_row_batches = pa.Table.from_batches(big.to_batches(max_chunksize=1))  # refused mid-stream
    with pytest.raises(BufferRefusedError) as e:
        client.put_table(one_row_batches, "big")
    assert 3_145 < int(re.search(r"passed (\d+) bytes", str(e.value)).group(1)) < 5_021
    raw = flight.FlightClient(buf.url)  # a metadata-only message is no rows, not a crash
    writer, _ = raw.do_put(flight.FlightDescriptor.for_command(b'{"group_id": "m", "rows": 6}'), small.schema)
    writer.write_metadata(b"x")
    with pytest.raises(flight.FlightServerError, match="refused, nothing stored") as e:
        writer.close()
    assert json.loads(e.value.extra_info)["code"] == "invalid"
    assert client.stats().refused_invalid == 3
    assert os.listdir(tmp_path / "run" / "buffer" / "groups") == []
    assert client.put_table(small, "small") is True
    assert client.get_batch(1).group_ids == ["small"]


def test_duplicate_group_id_is_refused(serve):
    buf = serve()
    client = buf.client()
    group = make_group("dup")
    assert client.put_group(group) is True
    raw = flight.FlightClient(buf.url)
    writer, _ = raw.do_put(
        flight.FlightDescriptor.for_command(b'{"group_id": "dup", "rows": 6}'), group_to_table(group).schema
    )
    writer.write_table(group_to_table(group))
    with pytest.raises(flight.FlightServerError, match="group 'dup' was already accepted"):
        writer.close()
    batch = client.get_batch(1, timeout_s=5)
    assert client.ack(batch.batch_id) == 1 and client.ack(batch.batch_id) == 0
    assert client.put_group(group) is False  # still refused after it was trained
    stats = client.stats()
    assert (stats.groups_put, stats.refused_duplicate, stats.pending_groups) == (1, 2, 0)


def test_bad_requests_get_clear_errors_and_the_service_stays_up(serve):
    buf = serve()
    client = buf.client()
    raw = flight.FlightClient(buf.url)
    for action, body, message in [
        ("stats", b"[1]", "must be a JSON object"),
        ("ack", b"{not json", "is not JSON"),
        ("set_version", b'{"version": "3"}', "'version' must be int"),
        ("shutdown", b"{}", "unknown action 'shutdown'"),
    ]:
        with pytest.raises(flight.FlightServerError, match=message):
            list(raw.do_action(flight.Action(action, body)))
    with pytest.raises(BufferRefusedError) as e:
        client.ack("nope")
    assert e.value.code == "unknown_batch"
    with pytest.raises(flight.FlightServerError, match="needs n >= 1"):
        raw.do_get(flight.Ticket(json.dumps({"n": 0, "request_id": "r"}).encode())).read_all()
    assert client.stats().groups_put == 0
    assert [a.type for a in raw.list_actions()] == ["acquire", "release", "set_version", "ack", "requeue", "stats"]


def test_retried_request_gets_the_same_batch_and_requeue(serve):
    buf = serve()
    client = buf.client()
    for i in range(4):
        client.put_group(make_group(f"g{i}"))
    raw = flight.FlightClient(buf.url)
    ticket = flight.Ticket(json.dumps({"n": 2, "request_id": "r1"}).encode())
    first, again = raw.do_get(ticket).read_all(), raw.do_get(ticket).read_all()
    assert first.equals(again) and first.num_rows == 12
    assert client.requeue("r1") == 2
    assert client.get_batch(3, timeout_s=5).group_ids == ["g0", "g1", "g2"]


def test_token_is_required_when_set(serve):
    buf = serve(token="s3cret")
    assert buf.client().stats().groups_put == 0
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(flight.FlightClient(buf.url).do_action(flight.Action("stats", b"{}")))
    wrong = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer nope")])
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(flight.FlightClient(buf.url).do_action(flight.Action("stats", b"{}"), wrong))


def test_non_loopback_bind_without_token_refuses_to_start(tmp_path):
    with pytest.raises(InsecureBindError, match="refusing to bind '0.0.0.0'"):
        BufferService(str(tmp_path), BufferConfig(host="0.0.0.0", max_running_groups=16))


def test_crash_after_puts_and_an_unacked_get_loses_nothing(serve, tmp_path):
    port = free_port()
    buf = serve(port=port, overrides=["buffer.max_staleness=4"])
    client = buf.client(max_retries=30, backoff_s=0.1)
    groups = [make_group(f"g{i}", seed=i) for i in range(6)]
    for g in groups:
        client.put_group(g)
    acked = client.get_batch(2, timeout_s=5)
    client.ack(acked.batch_id)
    unacked = client.get_batch(2, timeout_s=5)
    client.set_version(3)
    buf.kill()  # SIGKILL: no shutdown code runs

    restarted = serve(port=port, overrides=["buffer.max_staleness=4"])
    stats = client.stats()  # the same client reconnects to the restarted service
    assert (stats.recovered_groups, stats.version, stats.accepted) == (4, 3, 6)
    assert stats.clock == 1  # one batch trained by version 3: the admission clock survives
    batch = client.get_batch(4, timeout_s=5)
    assert batch.group_ids == ["g2", "g3", "g4", "g5"]  # unacked come back first, none twice
    assert batch.groups == groups[2:]
    assert unacked.group_ids == ["g2", "g3"]
    with pytest.raises(BufferRefusedError):
        client.ack(unacked.batch_id)  # the restart re-queued it
    assert client.put_group(groups[0]) is False and client.put_group(groups[5]) is False
    client.ack(batch.batch_id)
    client.set_version(4)
    restarted.kill()
    again = serve(port=port).client()
    assert (again.stats().pending_groups, again.stats().clock) == (0, 2)
    assert sorted(os.listdir(tmp_path / "run" / "buffer" / "groups")) == []


def test_concurrent_writers_each_group_once(serve):
    buf = serve()
    client = buf.client()  # one client shared by all threads, as in a rollout worker
    results = []

    def writer(w: int) -> None:
        for i in range(6):
            g = make_group(f"w{w}-{i % 4}", seed=w)  # ids 4 and 5 repeat 0 and 1
            results.append((g.group_id, client.put_group(g)))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(gid for gid, stored in results if stored) == sorted(f"w{w}-{i}" for w in range(8) for i in range(4))
    batch = buf.client().get_batch(32, timeout_s=10)
    assert len(set(batch.group_ids)) == 32


def test_expired_slots_give_their_place_back(serve):
    buf = serve(overrides=["buffer.max_staleness=0", "buffer.batch_groups=1", "buffer.slot_ttl_s=0.3"])
    client = buf.client()
    assert client.acquire() != "" and client.acquire() == ""
    assert client.acquire(wait_s=5) != ""  # the first slot expired while waiting
    assert client.stats().slots_expired == 1


def test_serve_command_refuses_a_public_bind_without_token(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "areal_mem.app.cli", "buffer", "serve", "--run-dir", str(tmp_path), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "AREAL_MEM_BUFFER_TOKEN"},
    )
    assert done.returncode == 2
    assert "refusing to bind '0.0.0.0' without a shared token" in done.stderr


def test_client_gives_up_after_bounded_retries():
    from areal_mem.buffer import BufferClient

    client = BufferClient(f"grpc://127.0.0.1:{free_port()}", max_retries=2, backoff_s=0.01)
    with pytest.raises(ConnectionError, match="unreachable after 3 attempts"):
        client.stats()


def test_signals_whose_handler_returns_do_not_end_the_wait_for_a_batch(serve):
    """SIGTERM to a learner that waits for a batch: its handler asks for a stop after the step
    and returns, but a signal that lands while pyarrow reads the batch cancels the read; the
    wait must go on (the same request, served the same batch again). Was: ArrowCancelled, and
    the learner's graceful stop ended in a traceback (exit 1). Signals every millisecond for a
    second, so that some land in a read."""
    import signal

    buf = serve()
    groups = [make_group(f"g{i}", n_traj=8, n_ctx=6, tokens=2000, seed=i) for i in range(8)]
    for g in groups:
        buf.client().put_group(g)
    seen, done = [], threading.Event()

    def barrage():  # for a second: then the read that is asked again must get through
        end = time.monotonic() + 1.0
        while not done.is_set() and time.monotonic() < end:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.001)

    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    sender = threading.Thread(target=barrage)
    sender.start()
    try:
        batch = buf.client().get_batch(8, timeout_s=30)
    finally:
        done.set()
        sender.join()
        signal.signal(signal.SIGTERM, previous)
    assert seen and batch.groups == groups
