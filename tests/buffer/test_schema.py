"""The context-row schema: exact round trips and precise refusals."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_mem.buffer.schema import (
    CONTEXT_SCHEMA,
    SchemaError,
    concat_groups,
    group_to_table,
    table_to_groups,
    validate_group,
)
from areal_mem.trajectory import Context, Group, Trajectory

from .conftest import make_group


def test_round_trip_is_exact_and_typed():
    group = make_group("g", n_traj=3, n_ctx=4, tokens=50)
    table = group_to_table(group)
    assert table.num_rows == 12
    assert table.schema.remove_metadata().field("behav_logp").type == pa.list_(pa.float32())
    for f in CONTEXT_SCHEMA:
        assert table.schema.field(f.name).type == f.type
    assert table.column("is_final").to_pylist() == [False, False, False, True] * 3
    assert table.column("turn").to_pylist() == [0, 1, 2, 3] * 3
    assert table_to_groups(table) == [group]


def test_rows_out_of_order_come_back_in_turn_order():
    group = make_group("g", n_traj=2, n_ctx=3)
    table = group_to_table(group)
    shuffled = table.take([2, 0, 4, 1, 5, 3])  # trajectory 0 still appears first
    assert table_to_groups(shuffled) == [group]


def test_concat_unifies_differing_extra_columns():
    a = group_to_table(make_group("a"))
    b = group_to_table(make_group("b")).drop_columns(["answer"])
    c = group_to_table(make_group("c")).set_column(11, "answer", pa.array([1] * 6))
    both = concat_groups([a, b, c])
    assert both.num_rows == 18
    assert both.column("answer").type == pa.string()
    assert both.column("answer").null_count == 6
    assert [g.group_id for g in table_to_groups(both)] == ["a", "b", "c"]


def _replace(table: pa.Table, name: str, array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, array)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t.drop_columns(["versions"]), "missing column 'versions'"),
        (
            lambda t: _replace(t, "behav_logp", pc.cast(t.column("behav_logp"), pa.list_(pa.float64()))),
            "column 'behav_logp' is list<item: double>, expected list<item: float>",
        ),
        (
            lambda t: _replace(t, "prompt_len", pc.add(t.column("prompt_len"), pa.scalar(1, pa.int32()))),
            "row 0 (trajectory 'g/0', turn 0), field 'loss_mask': ",
        ),
        (lambda t: _replace(t, "group_id", pa.array(["g"] * 5 + ["h"])), "exactly one group"),
        (lambda t: _replace(t, "is_final", pa.array([False] * 6)), "exactly one is_final"),
        (lambda t: _replace(t, "turn", pa.array([0, 0, 0, 1, 0, 1], pa.int32())), "duplicate turn"),
        (lambda t: _replace(t, "reward", pa.array([0.5, 0.25, 0, 0, 0, 0], pa.float32())), "reward and start_version"),
        (lambda t: _replace(t, "traj_id", pa.array(["a", None, "b", "b", "c", "c"])), "'traj_id' has 1 null"),
        (lambda t: t.append_column("nested", pa.array([[1]] * 6)), "extra column 'nested'"),
        (lambda t: t.slice(0, 0), "no rows"),
        (
            lambda t: _replace(t, "loss_mask", pc.list_slice(t.column("loss_mask"), 0, 0)),
            "field 'loss_mask': 0 entries",
        ),
        (
            lambda t: _replace(
                t,
                "loss_mask",
                pa.array(
                    [[2] * n for n in pc.list_value_length(t.column("loss_mask")).to_pylist()], pa.list_(pa.int8())
                ),
            ),
            "field 'loss_mask': value other than 0 and 1: 2 at position 0",
        ),
    ],
)
def test_invalid_tables_are_refused_with_the_reason(mutate, message):
    table = group_to_table(make_group("g", n_traj=3, n_ctx=2))
    assert validate_group(table) == "g"
    with pytest.raises(SchemaError) as e:
        validate_group(mutate(table))
    assert message in str(e.value)


def test_validate_checks_the_named_group_id():
    table = group_to_table(make_group("g"))
    with pytest.raises(SchemaError, match="rows carry group_id 'g' but the put names 'x'"):
        validate_group(table, "x")


@st.composite
def groups(draw):
    """Random groups: any trainable lengths, float32 log-probs, info scalars."""
    n_traj = draw(st.integers(1, 3))
    trajs = []
    for t in range(n_traj):
        contexts = []
        for _ in range(draw(st.integers(1, 3))):
            prompt = draw(st.integers(1, 6))
            resp = draw(st.integers(1, 6))
            contexts.append(
                Context(
                    input_ids=draw(st.lists(st.integers(0, 2**31 - 1), min_size=prompt + resp, max_size=prompt + resp)),
                    prompt_len=prompt,
                    loss_mask=draw(st.lists(st.integers(0, 1), min_size=resp, max_size=resp)),
                    behav_logp=draw(st.lists(st.floats(-50, 0, width=32), min_size=resp, max_size=resp)),
                    versions=draw(st.lists(st.integers(-1, 100), min_size=resp, max_size=resp)),
                )
            )
        trajs.append(
            Trajectory(
                f"t{t}",
                contexts,
                reward=draw(st.floats(0, 1, width=32)),
                start_version=draw(st.integers(0, 100)),
                info={"answer": draw(st.text(max_size=5)), "turns": len(contexts)},
            )
        )
    return Group(draw(st.text(min_size=1, max_size=8)), trajs)


@settings(max_examples=60, deadline=None, database=None)
@given(groups())
def test_any_group_round_trips_exactly(group):
    assert table_to_groups(group_to_table(group)) == [group]
