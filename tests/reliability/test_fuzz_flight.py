"""Fuzzed calls to every Flight action, do_put and do_get of the replay buffer service.

Each bad call must be refused with a `FlightServerError` whose `extra_info` is the service's
`{"code": "invalid"}` (never an internal error or a raw Python exception) naming the field,
nothing may be stored, and the next good put -> get -> ack round trip must return the rows.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from hypothesis import given
from hypothesis import strategies as st

from areal_mem.buffer.schema import CONTEXT_SCHEMA, group_to_table
from areal_mem.buffer.server.service import FIELDS, MAX_JSON_BYTES, MAX_VERSION
from areal_mem.trajectory import Context, Group, Trajectory

HUGE_INTS = st.sampled_from([2**63, -(2**63) - 1, 10**30, -(10**400)])
SCALARS = (
    st.booleans() | st.integers() | HUGE_INTS | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS | st.none(),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6,
)


def not_(*kinds) -> st.SearchStrategy:
    def ok(v):
        if isinstance(v, bool):
            return bool in kinds
        return isinstance(v, tuple(k for k in kinds if k is not bool))

    return VALUES.filter(lambda v: v is not None and not ok(v))


# One valid body per call, and bad values for each of its fields.
BASES = {
    "do_put": {"group_id": "g", "rows": 2, "slot": ""},
    "do_get": {"n": 1, "request_id": "fuzz", "wait_s": 0},
    "acquire": {"wait_s": 0},
    "release": {"slot": "no-such-slot"},
    "set_version": {"version": 0},
    "ack": {"batch_id": "no-such-batch", "group_ids": []},
    "requeue": {"batch_id": "no-such-batch"},
    "stats": {},
}
BAD = {
    ("do_put", "group_id"): not_(str),
    ("do_put", "slot"): not_(str),
    ("do_put", "rows"): not_(int) | st.integers(max_value=0) | st.integers(min_value=MAX_VERSION + 1),
    ("do_get", "n"): not_(int) | st.integers(max_value=0) | st.integers(min_value=MAX_VERSION + 1),
    ("do_get", "request_id"): not_(str) | st.just(""),
    ("do_get", "wait_s"): not_(int, float),
    ("acquire", "wait_s"): not_(int, float),
    ("release", "slot"): not_(str),
    ("set_version", "version"): not_(int) | st.integers(max_value=-1) | st.integers(min_value=MAX_VERSION + 1),
    ("ack", "batch_id"): not_(str),
    ("ack", "group_ids"): not_(list),
    ("requeue", "batch_id"): not_(str),
}
MALFORMED = [
    b"{",
    b"\xff\xfe\x00",
    b"[]",
    b"123",
    b'"s"',
    b"null",
    b"[" * 50_000 + b"]" * 50_000,
    b"a=1",
    b'{"x": ' + b" " * MAX_JSON_BYTES + b"1}",
]
_ids = itertools.count()


def _group(gid: str) -> Group:
    trajs = [
        Trajectory(
            f"{gid}/{t}",
            [
                Context(
                    list(range(3, 13)), 4, [1, 0, 1, 1, 1, 0], [-0.5, 0.0, -0.25, -1.0, -2.0, 0.0], [0, -1, 0, 0, 0, -1]
                )
            ],
            reward=float(t),
            start_version=0,
        )
        for t in range(2)
    ]
    return Group(gid, trajs)


@pytest.fixture(scope="module")
def buf(buffer_service):
    return buffer_service


@pytest.fixture(scope="module")
def raw(buf):
    c = flight.FlightClient(buf.url)
    yield c
    c.close()


def opts(token):
    return flight.FlightCallOptions(timeout=30, headers=[(b"authorization", f"Bearer {token}".encode())])


def call(raw, token, name: str, body: bytes):
    """One call with this raw body: the action, or the do_put descriptor, or the do_get ticket."""
    if name == "do_get":
        return raw.do_get(flight.Ticket(body), opts(token)).read_all()
    if name == "do_put":
        table = group_to_table(_group(f"never-{next(_ids)}"))
        writer, _ = raw.do_put(flight.FlightDescriptor.for_command(body), table.schema, opts(token))
        writer.write_table(table)
        writer.close()
        return None
    return list(raw.do_action(flight.Action(name, body), opts(token)))


def refused(fn, *needles: str) -> str:
    with pytest.raises(flight.FlightError) as e:
        fn()
    assert type(e.value) is flight.FlightServerError, f"{type(e.value).__name__}: {e.value}"
    assert json.loads(e.value.extra_info) == {"code": "invalid"}, e.value
    text = str(e.value)
    assert "Python exception" not in text and "Traceback" not in text, text
    for n in needles:
        assert n in text, (n, text)
    return text


def round_trip(buf) -> None:
    """The next good put, get and ack: the rows come back exactly, nothing else was stored."""
    gid = f"good-{next(_ids)}"
    table = group_to_table(_group(gid))
    with buf.client() as c:
        before = c.stats()
        assert c.put_table(table, gid) is True
        batch = c.get_batch(1, timeout_s=30)
        assert batch.group_ids == [gid]
        assert batch.table.select(CONTEXT_SCHEMA.names).equals(table.select(CONTEXT_SCHEMA.names))
        assert c.ack(batch.batch_id) == 1
        after = c.stats()
    assert after.groups_put == before.groups_put + 1 and after.pending_groups == 0
    assert after.running == 0 and after.outstanding_batches == 0


def test_every_action_the_server_lists_is_fuzzed(raw, buf):
    listed = {a.type for a in raw.list_actions(opts(buf.token))}
    assert listed == set(FIELDS) - {"do_put", "do_get"} == set(BASES) - {"do_put", "do_get"}
    assert {k for k, _ in BAD} | {"stats"} == set(BASES)
    assert all(set(BASES[k]) == set(v) for k, v in FIELDS.items())


@pytest.mark.parametrize("name", sorted(BASES))
def test_malformed_bodies_are_refused_as_invalid(name, raw, buf):
    for body in MALFORMED:
        refused(lambda: call(raw, buf.token, name, body))
    round_trip(buf)


@pytest.mark.parametrize("name,key", sorted(BAD))
@given(data=st.data())
def test_a_bad_value_in_any_field_is_refused_naming_it(name, key, raw, buf, data):
    body = {**BASES[name], key: data.draw(BAD[(name, key)], label=key)}
    refused(lambda: call(raw, buf.token, name, json.dumps(body).encode()), repr(key)[1:-1])
    round_trip(buf)


@pytest.mark.parametrize("name", sorted(BASES))
@given(key=st.text(min_size=1, max_size=10), value=VALUES)
def test_unknown_fields_are_refused_naming_them(name, raw, buf, key, value):
    if key in BASES[name]:
        key += "_x"
    body = json.dumps({**BASES[name], key: value}).encode()
    refused(lambda: call(raw, buf.token, name, body), "unknown field")
    round_trip(buf)


def _put_table(raw, token, table: pa.Table, gid: str) -> None:
    writer, _ = raw.do_put(
        flight.FlightDescriptor.for_command(json.dumps({"group_id": gid, "rows": table.num_rows}).encode()),
        table.schema,
        opts(token),
    )
    writer.write_table(table)
    writer.close()


def _bad_tables(gid: str, marker: str):
    good = group_to_table(_group(gid))
    payload = pickle.dumps(_Touch(marker))  # runs `open(marker, "w")` if anyone unpickles it
    evil = pa.field(
        "evil",
        pa.binary(),
        metadata={b"ARROW:extension:name": b"arrow.py_extension_type", b"ARROW:extension:metadata": payload},
    )
    return {
        "empty": (good.slice(0, 0), "field 'rows'"),
        "missing column": (good.drop_columns(["reward"]), "missing column 'reward'"),
        "wrong type": (
            good.set_column(good.schema.get_field_index("reward"), "reward", good.column("reward").cast(pa.float64())),
            "column 'reward'",
        ),
        "duplicate column": (good.append_column("turn", good.column("turn")), "duplicate column"),
        "nulls": (
            good.set_column(good.schema.get_field_index("turn"), "turn", pa.array([None] * good.num_rows, pa.int32())),
            "null",
        ),
        "other group id": (
            good.set_column(good.schema.get_field_index("group_id"), "group_id", pa.array(["other"] * good.num_rows)),
            "'other'",
        ),
        "pickled extension type": (
            good.append_column(evil, pa.array([payload] * good.num_rows, pa.binary())),
            "extra column 'evil'",
        ),
    }


class _Touch:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_bad_tables_are_refused_and_pickled_types_never_loaded(raw, buf, tmp_path):
    marker = str(tmp_path / "unpickled")
    with buf.client() as c:
        before = c.stats().groups_put
    for case, (table, needle) in _bad_tables("g-bad", marker).items():
        text = refused(lambda: _put_table(raw, buf.token, table, "g-bad"), needle)
        assert "nothing stored" in text, (case, text)
    assert not os.path.exists(marker), "the service unpickled data from the network"
    with buf.client() as c:
        assert c.stats().groups_put == before
    round_trip(buf)


TYPES = [
    pa.int8(),
    pa.int64(),
    pa.float16(),
    pa.string(),
    pa.binary(),
    pa.bool_(),
    pa.list_(pa.string()),
    pa.large_list(pa.int32()),
    pa.struct([("a", pa.int32())]),
    pa.null(),
    pa.dictionary(pa.int8(), pa.string()),
]


@given(column=st.sampled_from(CONTEXT_SCHEMA.names), typ=st.sampled_from(TYPES))
def test_a_column_of_another_type_is_refused(raw, buf, column, typ):
    table = group_to_table(_group("g-typed"))
    if table.schema.field(column).type == typ:
        typ = pa.float16()
    new = pa.nulls(table.num_rows, typ) if typ != pa.null() else pa.nulls(table.num_rows)
    table = table.set_column(table.schema.get_field_index(column), column, new)
    refused(lambda: _put_table(raw, buf.token, table, "g-typed"), column)
    round_trip(buf)
