"""The context-row Arrow schema (docs/architecture.md, "The context row"), in one place, and its conversions.

A `Group` becomes one Arrow table with one row per context; `validate_group`
is the check the buffer service applies to every put, so a writer that bypasses
`group_to_table` is held to the same contract. Floats are stored as float32:
a round trip is bit for bit for values that are float32 already.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..trajectory import Context, Group, Trajectory

CONTEXT_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("traj_id", pa.string(), nullable=False),
        pa.field("turn", pa.int32(), nullable=False),
        pa.field("is_final", pa.bool_(), nullable=False),
        pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("prompt_len", pa.int32(), nullable=False),
        pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),
        pa.field("behav_logp", pa.list_(pa.float32()), nullable=False),
        pa.field("versions", pa.list_(pa.int32()), nullable=False),
        pa.field("reward", pa.float32(), nullable=False),
        pa.field("start_version", pa.int32(), nullable=False),
    ]
)
REQUIRED = tuple(CONTEXT_SCHEMA.names)
# Extra columns hold flat per-trajectory scalars (Trajectory.info); anything
# nested is refused so every batch can be concatenated.
EXTRA_TYPES = (pa.bool_(), pa.int64(), pa.float64(), pa.string(), pa.null())
_PER_TOKEN = ("loss_mask", "behav_logp", "versions")
MAX_VERSION = 2**31 - 1  # versions are int32
# Value limits of a trainable row (docs/reliability_security.md "What a group may hold").
# A sampled token's log-prob is <= 0; the generator's float arithmetic may round a near-certain
# token's log-prob a hair above 0 (SGLang and the embedded server compute them in fp32), so up to
# LOGP_TOLERANCE above 0 is accepted. Below MIN_LOGP (probability e^-1000) nothing was sampled:
# such a value is a sentinel or garbage, and exp() of it overflows the behaviour weight.
LOGP_TOLERANCE = 1e-3
MIN_LOGP = -1000.0
# |reward| above this is refused: without std normalisation the advantage is the centred reward,
# and a float32 loss of an advantage near 3e38 overflows.
MAX_ABS_REWARD = 1e6


class SchemaError(ValueError):
    """A table that is not a valid group of context rows; the message names the column/row."""


def group_to_table(group: Group) -> pa.Table:
    """One row per context, trajectories in order, contexts in turn order."""
    if not group.trajectories:
        raise SchemaError(f"group {group.group_id!r} has no trajectories")
    cols: Dict[str, list] = {name: [] for name in REQUIRED}
    info_keys: List[str] = []
    for traj in group.trajectories:
        for key in traj.info:
            if key in CONTEXT_SCHEMA.names:
                raise SchemaError(f"trajectory {traj.traj_id!r}: info key {key!r} clashes with a context-row column")
            if key not in info_keys:
                info_keys.append(key)
    extras: Dict[str, list] = {key: [] for key in info_keys}
    kept = []
    for traj in group.trajectories:
        if not traj.contexts:
            raise SchemaError(f"trajectory {traj.traj_id!r} has no contexts")
        # A context that generated nothing (its prompt alone filled max_context_tokens) has no
        # token to train: it is left out, and so is a trajectory left without any context.
        contexts = [c for c in traj.contexts if len(c.input_ids) > c.prompt_len]
        if contexts:
            kept.append((traj, contexts))
    if not kept:
        raise SchemaError(f"group {group.group_id!r}: no context has a response token")
    for traj, contexts in kept:
        last = len(contexts) - 1
        for turn, ctx in enumerate(contexts):
            cols["group_id"].append(group.group_id)
            cols["traj_id"].append(traj.traj_id)
            cols["turn"].append(turn)
            cols["is_final"].append(turn == last)
            cols["input_ids"].append(np.asarray(ctx.input_ids, dtype=np.int32))
            cols["prompt_len"].append(ctx.prompt_len)
            cols["loss_mask"].append(np.asarray(ctx.loss_mask, dtype=np.int8))
            cols["behav_logp"].append(np.asarray(ctx.behav_logp, dtype=np.float32))
            cols["versions"].append(np.asarray(ctx.versions, dtype=np.int32))
            cols["reward"].append(traj.reward)
            cols["start_version"].append(traj.start_version)
            for key in info_keys:
                extras[key].append(traj.info.get(key))
    arrays = [
        _list_array(cols[f.name], f.type) if pa.types.is_list(f.type) else pa.array(cols[f.name], type=f.type)
        for f in CONTEXT_SCHEMA
    ]
    table = pa.Table.from_arrays(arrays, schema=CONTEXT_SCHEMA)
    for key in info_keys:
        try:
            table = table.append_column(key, pa.array(extras[key]))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SchemaError(f"group {group.group_id!r}: info key {key!r}: {e}") from None
    validate_group(table)
    return table


def table_to_groups(table: pa.Table) -> List[Group]:
    """Groups in order of first appearance; extra columns come back as `Trajectory.info`.

    An info key that a trajectory did not set comes back as None.
    """
    extra = [n for n in table.column_names if n not in REQUIRED]
    data = {name: table.column(name) for name in table.column_names}
    scalars = {n: data[n].to_pylist() for n in ("group_id", "traj_id", "prompt_len", "reward", "start_version", *extra)}
    groups: Dict[str, Group] = {}
    trajs: Dict[tuple, Trajectory] = {}
    by_turn = np.argsort(table.column("turn").to_numpy(), kind="stable")
    order = _rows_by_trajectory(scalars["group_id"], scalars["traj_id"], by_turn)
    for i in order:
        gid, tid = scalars["group_id"][i], scalars["traj_id"][i]
        group = groups.get(gid)
        if group is None:
            group = groups[gid] = Group(group_id=gid, trajectories=[])
        traj = trajs.get((gid, tid))
        if traj is None:
            traj = trajs[(gid, tid)] = Trajectory(
                traj_id=tid,
                contexts=[],
                reward=scalars["reward"][i],
                start_version=scalars["start_version"][i],
                info={n: scalars[n][i] for n in extra},
            )
            group.trajectories.append(traj)
        traj.contexts.append(
            Context(
                input_ids=_row(data["input_ids"], i).tolist(),
                prompt_len=scalars["prompt_len"][i],
                loss_mask=_row(data["loss_mask"], i).tolist(),
                behav_logp=_row(data["behav_logp"], i).tolist(),
                versions=_row(data["versions"], i).tolist(),
            )
        )
    return list(groups.values())


def validate_group(table: pa.Table, group_id: str = "", vocab_size: int = 0, max_version: Optional[int] = None) -> str:
    """Check one group's table against the contract; return its group id.

    Types and shape: refuses missing or mistyped columns, nulls, per-token lists whose lengths
    disagree with `len(input_ids) - prompt_len`, mixed group ids (or one that is not
    `group_id` when given), duplicate turns, a trajectory without exactly one final context at
    its last turn, and rewards/start versions that vary inside one trajectory.

    Values (what the learner can train on): `prompt_len >= 1` and at least one response token
    per row; token ids in `[0, vocab_size)` (`>= 0` when the vocabulary is not known: 0); a loss
    mask of 0/1; finite rewards with `|reward| <= MAX_ABS_REWARD`; finite behaviour log-probs
    in `[MIN_LOGP, LOGP_TOLERANCE]`; turns `>= 0`; per-token versions `>= -1` and start
    versions `>= 0`, both at most `max_version` when given (the buffer passes its version plus
    the staleness window plus one push in flight). Every refusal names the group, the row (its
    trajectory and turn) and the field.
    """
    _check_types(table)
    gid = _group_id_of(table, group_id)
    _check_values(table, gid, vocab_size, max_version)
    _check_trajectories(table)
    return gid


def _check_types(table: pa.Table) -> None:
    """Every contract column present with its type and no nulls; extra columns flat."""
    if table.num_rows == 0:
        raise SchemaError("the group has no rows")
    for field in CONTEXT_SCHEMA:
        if field.name not in table.column_names:
            raise SchemaError(f"missing column {field.name!r} ({field.type})")
        got = table.schema.field(field.name).type
        if got != field.type:
            raise SchemaError(f"column {field.name!r} is {got}, expected {field.type}")
        col = table.column(field.name)
        if col.null_count:
            raise SchemaError(f"column {field.name!r} has {col.null_count} null value(s)")
        if pa.types.is_list(field.type) and pc.list_flatten(col).null_count:
            raise SchemaError(f"column {field.name!r} has null elements inside its lists")
    for name in table.column_names:
        if name not in REQUIRED and table.schema.field(name).type not in EXTRA_TYPES:
            raise SchemaError(
                f"extra column {name!r} is {table.schema.field(name).type}; extra "
                f"columns must be flat bool/int64/float64/string"
            )


def _group_id_of(table: pa.Table, group_id: str) -> str:
    """The one non-empty group id of the rows (the put's, when it names one)."""
    gids = pc.unique(table.column("group_id"))
    if len(gids) != 1:
        raise SchemaError(f"a put holds exactly one group; got group ids {gids.to_pylist()[:5]}")
    gid = gids[0].as_py()
    if not gid:
        raise SchemaError("group_id is empty")
    if group_id and gid != group_id:
        raise SchemaError(f"rows carry group_id {gid!r} but the put names {group_id!r}")
    return gid


def _check_values(table: pa.Table, gid: str, vocab_size: int, max_version: Optional[int]) -> None:
    """What the learner can train on: lengths, token ids, masks, log-probs, versions, rewards."""

    def where(i: int, name: str) -> str:
        return (
            f"group {gid[:80]!r}, row {i} (trajectory {table.column('traj_id')[i].as_py()[:80]!r}, "
            f"turn {table.column('turn')[i].as_py()}), field {name!r}"
        )

    prompt_len = table.column("prompt_len").to_numpy()
    n_ids = pc.list_value_length(table.column("input_ids")).to_numpy()
    response = n_ids - prompt_len
    bad = np.flatnonzero((prompt_len < 1) | (response < 0))
    if bad.size:
        i = int(bad[0])
        raise SchemaError(
            f"{where(i, 'prompt_len')}: {prompt_len[i]} is outside 1..{n_ids[i]} (len(input_ids); "
            f"the first response token needs a prompt token before it)"
        )
    for name in _PER_TOKEN:
        lengths = pc.list_value_length(table.column(name)).to_numpy()
        bad = np.flatnonzero(lengths != response)
        if bad.size:
            i = int(bad[0])
            raise SchemaError(
                f"{where(i, name)}: {lengths[i]} entries, expected len(input_ids) - prompt_len = {response[i]}"
            )
    bad = np.flatnonzero(response < 1)
    if bad.size:
        raise SchemaError(f"{where(int(bad[0]), 'input_ids')}: no response token (len(input_ids) == prompt_len)")
    turns = table.column("turn").to_numpy()
    bad = np.flatnonzero(turns < 0)
    if bad.size:
        raise SchemaError(f"{where(int(bad[0]), 'turn')}: {turns[bad[0]]} is negative")
    _check_tokens(
        table,
        "input_ids",
        lambda v: (v < 0) | (v >= vocab_size) if vocab_size else v < 0,
        where,
        f"token id outside 0..{vocab_size - 1} (the model's vocabulary)" if vocab_size else "negative token id",
    )
    _check_tokens(table, "loss_mask", lambda v: (v != 0) & (v != 1), where, "value other than 0 and 1")
    _check_tokens(
        table,
        "behav_logp",
        lambda v: ~np.isfinite(v) | (v < MIN_LOGP) | (v > LOGP_TOLERANCE),
        where,
        f"log-prob not finite or outside [{MIN_LOGP:g}, {LOGP_TOLERANCE:g}]",
    )
    top = MAX_VERSION if max_version is None else max_version
    _check_tokens(table, "versions", lambda v: (v < -1) | (v > top), where, f"version outside -1..{top}")
    reward = table.column("reward").to_numpy()
    bad = np.flatnonzero(~np.isfinite(reward) | (np.abs(reward) > MAX_ABS_REWARD))
    if bad.size:
        i = int(bad[0])
        raise SchemaError(f"{where(i, 'reward')}: {reward[i]} is not finite or beyond +-{MAX_ABS_REWARD:g}")
    start = table.column("start_version").to_numpy()
    bad = np.flatnonzero((start < 0) | (start > top))
    if bad.size:
        i = int(bad[0])
        raise SchemaError(f"{where(i, 'start_version')}: {start[i]} is outside 0..{top}")


def _check_tokens(table: pa.Table, name: str, is_bad, where, what: str) -> None:
    """Refuse the first per-token value for which `is_bad` holds, naming its row and position."""
    col = table.column(name).combine_chunks()
    values = col.flatten().to_numpy(zero_copy_only=False)
    if not values.size:
        return
    bad = np.flatnonzero(is_bad(values))
    if not bad.size:
        return
    k = int(bad[0])
    offsets = col.offsets.to_numpy() - col.offsets[0].as_py()
    i = int(np.searchsorted(offsets, k, side="right") - 1)
    raise SchemaError(f"{where(i, name)}: {what}: {values[k].item()!r} at position {k - int(offsets[i])}")


def concat_groups(tables: List[pa.Table]) -> pa.Table:
    """One table of several groups; differing extra columns are unified (missing -> null)."""
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # The same info key with incompatible types in two groups: keep it as text.
        as_text = [
            t.cast(pa.schema([f if f.name in REQUIRED else pa.field(f.name, pa.string()) for f in t.schema]))
            for t in tables
        ]
        return pa.concat_tables(as_text, promote_options="permissive")


def _check_trajectories(table: pa.Table) -> None:
    tids = table.column("traj_id").to_pylist()
    turns = table.column("turn").to_numpy()
    final = table.column("is_final").to_numpy(zero_copy_only=False)
    reward = table.column("reward").to_numpy()
    start = table.column("start_version").to_numpy()
    rows: Dict[str, List[int]] = {}
    for i, tid in enumerate(tids):
        rows.setdefault(tid, []).append(i)
    for tid, idx in rows.items():
        t = turns[idx]
        if len(set(t.tolist())) != len(idx):
            raise SchemaError(f"trajectory {tid!r}: duplicate turn numbers {sorted(t.tolist())}")
        finals = [i for i in idx if final[i]]
        if len(finals) != 1 or turns[finals[0]] != t.max():
            raise SchemaError(
                f"trajectory {tid!r}: needs exactly one is_final row, at its last "
                f"turn {int(t.max())}; got {len(finals)}"
            )
        if len(set(reward[idx].tolist())) != 1 or len(set(start[idx].tolist())) != 1:
            raise SchemaError(f"trajectory {tid!r}: reward and start_version must be the same on all its contexts")


def _rows_by_trajectory(gids: list, tids: list, by_turn: np.ndarray) -> List[int]:
    """Row indices grouped by (group, trajectory) in first-appearance order, turns ascending."""
    first: Dict[tuple, int] = {}
    for i, key in enumerate(zip(gids, tids)):
        first.setdefault(key, i)
    return sorted(by_turn.tolist(), key=lambda i: first[(gids[i], tids[i])])


def _row(col: pa.ChunkedArray, i: int) -> np.ndarray:
    return col[i].values.to_numpy(zero_copy_only=False)


def _list_array(rows: List[np.ndarray], typ: pa.DataType) -> pa.Array:
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    values = np.concatenate(rows) if rows else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=typ.value_type))
