"""Question files: FlashRAG jsonl and Search-R1 parquet, the converter, and errors naming file and line."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from areal_mem.app.cli import main
from areal_mem.data import DataError, Task, read_tasks, write_tasks


def test_flashrag_reads_world_split(world_dir):
    tasks = read_tasks(f"{world_dir}/dev.jsonl")
    with open(f"{world_dir}/dev.jsonl") as f:
        first = json.loads(f.readline())
    assert tasks[0].id == first["id"] and tasks[0].question == first["question"]
    assert tasks[0].golden_answers == first["golden_answers"]
    assert tasks[0].metadata["supporting_ids"] == first["supporting_ids"]


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"id": 1, "question": "q"', "not valid JSON"),
        ('{"id": 1, "golden_answers": ["a"]}', "'question' must be a non-empty string"),
        ('{"id": 1, "question": "q", "golden_answers": []}', "'golden_answers' must be a non-empty list"),
        ("[1, 2]", "expected a JSON object, got list"),
    ],
)
def test_flashrag_errors_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"id": "0", "question": "ok?", "golden_answers": "yes"}\n\n' + line + "\n")
    with pytest.raises(DataError) as e:
        read_tasks(str(path))
    assert str(e.value).startswith(f"{path}:3: ") and message in str(e.value)


def test_searchr1_parquet_round_trip_and_cli(tmp_path, capsys):
    tasks = [Task("a", "Who?", ["Ann", "Anna"], {"data_source": "nq"}), Task("b", "When?", ["1849"])]
    src = tmp_path / "in.jsonl"
    write_tasks(tasks, str(src))
    assert main(["data", "convert", str(src), str(tmp_path / "out.parquet")]) == 0
    assert "wrote 2 questions" in capsys.readouterr().out
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert table[0]["reward_model"]["ground_truth"]["target"] == ["Ann", "Anna"]
    assert table[0]["data_source"] == "nq"
    assert main(["data", "convert", str(tmp_path / "out.parquet"), str(tmp_path / "back.jsonl")]) == 0
    back = read_tasks(str(tmp_path / "back.jsonl"))
    assert [(t.id, t.question, t.golden_answers) for t in back] == [(t.id, t.question, t.golden_answers) for t in tasks]


def test_searchr1_reads_ground_truth_target_and_reports_row(tmp_path, capsys):
    rows = [
        {
            "question": "q1",
            "data_source": "hotpotqa",
            "extra_info": {"index": 7, "split": "train"},
            "reward_model": {"style": "rule", "ground_truth": {"target": ["x"]}},
        },
        {
            "question": "",
            "data_source": "nq",
            "extra_info": {"index": 8, "split": "train"},
            "reward_model": {"style": "rule", "ground_truth": {"target": ["y"]}},
        },
    ]
    path = tmp_path / "sr1.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataError, match=rf"{path}: row 1: 'question' must be a non-empty string"):
        read_tasks(str(path))
    pq.write_table(pa.Table.from_pylist(rows[:1]), path)
    (t,) = read_tasks(str(path))
    # no `id` column: `<file stem>-<row>` (extra_info.index is not an id: it restarts per data source)
    assert (t.id, t.golden_answers, t.metadata["data_source"]) == ("sr1-0", ["x"], "hotpotqa")
    assert main(["data", "convert", str(path), str(tmp_path / "x.txt")]) == 2
    assert "cannot tell the format" in capsys.readouterr().err
