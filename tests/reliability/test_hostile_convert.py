"""Hostile and careless question files given to `areal-mem data convert`: each is refused in one
line with exit status 2 (no traceback) naming the row and field, and a file of huge questions is
refused at its first row with bounded memory instead of converted into gigabytes."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from areal_mem.app.cli import main


def _convert(capsys, src, dst, *flags: str) -> str:
    assert main(["data", "convert", str(src), str(dst), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("areal-mem data: "), err
    assert not os.path.exists(dst) and not os.path.exists(f"{dst}.tmp")
    return err


def test_an_integer_over_4300_digits_is_refused_by_line(tmp_path, capsys):
    src = tmp_path / "dev.jsonl"
    good = {"id": "q0", "question": "who?", "golden_answers": ["x"]}
    src.write_text(json.dumps(good) + "\n" + '{"id": ' + "9" * 4301 + ', "question": "q", "golden_answers": ["a"]}\n')
    err = _convert(capsys, src, tmp_path / "out.jsonl")
    assert f"{src}:2: not valid JSON (Exceeds the limit (4300 digits) for integer string conversion" in err


BAD_COLUMNS = {
    "data_source binary": ("data_source", pa.array([b"\x00\xff"]), "'data_source' must be a string (got bytes)"),
    "data_source timestamp": (
        "data_source",
        pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us")),
        "'data_source' must be a string (got datetime)",
    ),
    "data_source struct": (
        "data_source",
        pa.array([{"a": 1}]),
        "'data_source' must be a string (got an object with keys ['a'])",
    ),
    "metadata binary": ("metadata", pa.array([b"\x00"]), "'metadata' must be a struct (got bytes)"),
    "metadata timestamp": (
        "metadata",
        pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us")),
        "'metadata' must be a struct (got datetime)",
    ),
    "metadata struct of binary": (
        "metadata",
        pa.array([{"blob": b"\x00\x01", "when": datetime.datetime(2024, 1, 1)}]),
        "'metadata.blob' holds bytes",
    ),
    "metadata struct of timestamp": (
        "metadata",
        pa.array([{"when": datetime.datetime(2024, 1, 1)}]),
        "'metadata.when' holds datetime",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_COLUMNS))
@pytest.mark.parametrize("out", ["out.jsonl", "out.parquet"])
def test_columns_a_task_file_cannot_hold_are_refused_by_name(case, out, tmp_path, capsys):
    column, values, needle = BAD_COLUMNS[case]
    table = pa.table({"id": ["q0"], "question": ["who?"], "golden_answers": [["x"]], column: values})
    src = tmp_path / "in.parquet"
    pq.write_table(table, src)
    err = _convert(capsys, src, tmp_path / out)
    assert f"{src}: row 0: {needle}" in err


def test_long_questions_and_answers_are_refused_at_their_row_and_the_limits_are_flags(tmp_path, capsys):
    src = tmp_path / "dev.jsonl"
    rows = [{"id": "a", "question": "q" * 8192, "golden_answers": ["x" * 2048]}]
    rows.append({"id": "b", "question": "q" * 8193, "golden_answers": ["x"]})
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = _convert(capsys, src, tmp_path / "out.jsonl")
    assert f"{src}:2: 'question' has 8193 characters, over the limit of 8192 (--max-question-chars)" in err
    err = _convert(capsys, src, tmp_path / "out.jsonl", "--max-question-chars", "9000", "--max-answer-chars", "100")
    assert f"{src}:1: answer 0 has 2048 characters, over the limit of 100 (--max-answer-chars)" in err
    assert main(["data", "convert", str(src), str(tmp_path / "out.jsonl"), "--max-question-chars", "9000"]) == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


# The peak is this process's own (VmHWM of its memory map): `ru_maxrss` keeps the parent's peak
# across fork and exec, so under a long pytest session it reported the test runner's gigabytes.
HUGE = """
import sys
from areal_mem.app.cli import main
rc = main(["data", "convert", sys.argv[1], sys.argv[2], *sys.argv[3:]])
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(rc, int(hwm.split()[1]) // 1024)
"""


def test_a_zstd_parquet_of_huge_questions_is_refused_with_bounded_memory(tmp_path):
    """2,048 questions of 256 kB (the probe's file had 8,192: 147 kB of zstd, 4.2 GB to convert)."""
    src = tmp_path / "huge.parquet"
    schema = pa.schema([("id", pa.string()), ("question", pa.string()), ("golden_answers", pa.list_(pa.string()))])
    with pq.ParquetWriter(src, schema, compression="zstd") as writer:
        for g in range(16):
            n = 128
            ids = [f"q{g * n + i}" for i in range(n)]
            writer.write_table(pa.table({"id": ids, "question": ["?" * 262_144] * n, "golden_answers": [["a"]] * n}))
    assert os.path.getsize(src) < 2_000_000
    dst = tmp_path / "out.jsonl"
    r = subprocess.run([sys.executable, "-c", HUGE, str(src), str(dst)], capture_output=True, text=True, timeout=120)
    rc, peak_mb = map(int, r.stdout.split())
    assert rc == 2 and "row 0: 'question' has 262144 characters, over the limit of 8192" in r.stderr
    assert "Traceback" not in r.stderr and not dst.exists()
    assert peak_mb < 600, peak_mb  # python + pyarrow + one batch (the whole file is 512 MB of text)
