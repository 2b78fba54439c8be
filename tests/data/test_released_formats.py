"""The question files users already have, each written exactly the way its released script writes it:

- Search-R1 `scripts/data_process/nq_search.py` / `qa_search_train_merge.py`: a datasets `.map`
  (source columns kept, the question stripped with "?" appended in place) then `to_parquet`;
- MemSearcher `data/prepare_train_data.py`: `reward_model.ground_truth` a numpy object array,
  `extra_info = {env, func_schemas, index, split}`, `pd.DataFrame(rows).to_parquet(index=False)`;
  `data/prepare_musique_recall.py`: the id in `extra_info.id`;
- FlashRAG `{ds}/test.jsonl`: `{id, question, golden_answers, metadata}` lines;
- ASearcher-train-data jsonl as `ASearcher/utils/search_tool.py` reads it: `question`, `answer`,
  `idx` / `qid` / `id`, `aug_answer`, `source`.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from areal_mem.app.cli import main
from areal_mem.data import DataError, DataFormat, detect_format, iter_tasks, read_tasks
from areal_mem.data import parquet as parquet_module
from areal_mem.data.parquet import parquet_row
from areal_mem.data.records import answers_from
from areal_mem.rollout.tasks import TaskCursor

FLASHRAG = {  # FlashRAG_datasets rows, as `datasets.load_dataset(...)["train"]` yields them
    "nq": [
        {"id": "train_0", "question": "total number of death row inmates in the us", "golden_answers": ["2,718"]},
        {"id": "train_1", "question": "big little lies season 2 how many episodes ", "golden_answers": ["seven"]},
        {"id": "train_2", "question": "who sang waiting for a girl like you?", "golden_answers": ["Foreigner"]},
    ],
    "hotpotqa": [
        {"id": "5a7a0693", "question": "Which magazine was started first", "golden_answers": ["Arthur's Magazine"]},
        {"id": "5a879ab0", "question": "The Oberoi family is part of a hotel company", "golden_answers": ["Delhi"]},
    ],
}


# ---- Search-R1 -------------------------------------------------------------------------------


def searchr1_process_fn(example, idx, data_source, split):
    """make_map_fn(split)'s process_fn: it edits the example's question in place and returns the new columns."""
    example["question"] = example["question"].strip()
    if example["question"][-1] != "?":
        example["question"] += "?"
    question = f"Answer the given question. ... Question: {example['question']}\n"
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": example["golden_answers"]}},
        "extra_info": {"split": split, "index": idx},
    }


def searchr1_rows(sources, split="train"):
    """`.map(make_map_fn(split), with_indices=True)` per source, then concatenate_datasets: the
    source columns stay (with the in-place question edit), the returned ones are added."""
    rows = []
    for source, examples in sources.items():
        for idx, original in enumerate(examples):
            example = dict(original)
            new = searchr1_process_fn(example, idx, source, split)
            rows.append({**example, **new})
    return rows


def write_like_datasets(rows, path, batch_rows=1000):
    """`Dataset.to_parquet`: Arrow types inferred from the rows (nested structs), written in batches."""
    table = pa.Table.from_pylist(rows)
    with pq.ParquetWriter(str(path), table.schema) as writer:
        for start in range(0, len(rows), batch_rows):
            writer.write_table(table.slice(start, batch_rows))


def test_searchr1_merged_train_parquet_as_released(tmp_path, capsys):
    path = tmp_path / "train.parquet"
    write_like_datasets(searchr1_rows(FLASHRAG), path)
    schema = pq.read_schema(path)
    assert pa.types.is_struct(schema.field("reward_model").type)  # nested, as datasets writes it
    assert detect_format(str(path))[0] is DataFormat.searchr1
    tasks = read_tasks(str(path))
    assert [t.id for t in tasks] == ["train_0", "train_1", "train_2", "5a7a0693", "5a879ab0"]
    assert tasks[1].question == "big little lies season 2 how many episodes?"
    assert tasks[0].golden_answers == ["2,718"] and tasks[3].golden_answers == ["Arthur's Magazine"]
    assert [t.metadata["data_source"] for t in tasks] == ["nq"] * 3 + ["hotpotqa"] * 2
    assert "prompt" not in tasks[0].metadata  # Search-R1's prompt text is not carried along

    assert main(["data", "convert", str(path), str(tmp_path / "train.jsonl")]) == 0
    out = capsys.readouterr().out
    assert f"read 5 questions from {path} (searchr1, detected: a 'golden_answers' column)" in out
    assert "wrote 5 questions" in out
    back = read_tasks(str(tmp_path / "train.jsonl"))
    assert [(t.id, t.question, t.golden_answers) for t in back] == [(t.id, t.question, t.golden_answers) for t in tasks]


def test_searchr1_without_source_columns_reads_target_and_makes_ids(tmp_path):
    """Only the columns the map adds (a file whose source columns were dropped): answers from
    reward_model.ground_truth.target; no id, and extra_info.index restarts per source, so ids
    are `<stem>-<row>`."""
    rows = [{k: v for k, v in r.items() if k not in ("id", "golden_answers")} for r in searchr1_rows(FLASHRAG)]
    path = tmp_path / "nq_hotpotqa_train.parquet"
    write_like_datasets(rows, path)
    fmt, why = detect_format(str(path))
    assert fmt is DataFormat.searchr1 and "struct" in why
    tasks = read_tasks(str(path))
    assert [t.id for t in tasks] == [f"nq_hotpotqa_train-{i}" for i in range(5)]
    assert tasks[4].golden_answers == ["Delhi"]


# ---- MemSearcher -----------------------------------------------------------------------------

ENV = "import requests\n\ndef wikipedia_search(query, top_n=5):\n    ...\n"  # stands in for ENV_CONTENT
SCHEMAS = json.dumps([{"type": "function", "function": {"name": "wikipedia_search"}}], indent=4)


def memsearcher_row(question, golden_answers, index, split="train"):
    """prepare_train_data.py's memsearcher_row."""
    return {
        "data_source": "musique_re_call",
        "question": question,
        "ability": "re_call",
        "reward_model": {"ground_truth": np.array(list(golden_answers), dtype=object), "style": "rule"},
        "extra_info": {"env": ENV, "func_schemas": SCHEMAS, "index": int(index), "split": str(split)},
    }


def norm_question(q):
    q = q.strip()
    if q[-1] != "?":
        q += "?"
    return q


def memsearcher_rows(sources):
    """from_flashrag: every source's rows, the index restarting at 0 for each."""
    return [
        memsearcher_row(norm_question(ex["question"]), ex["golden_answers"], idx)
        for examples in sources.values()
        for idx, ex in enumerate(examples)
    ]


def write_like_pandas(rows, path):
    """`pd.DataFrame(rows).to_parquet(path, index=False)` (pyarrow engine); pandas is not a
    dependency, and pyarrow converts the rows' numpy object arrays to the same list<string>."""
    try:
        import pandas as pd
    except ImportError:
        pq.write_table(pa.Table.from_pylist(rows), str(path))
    else:
        pd.DataFrame(rows).to_parquet(str(path), index=False)


def test_memsearcher_train_parquet_as_released(tmp_path, capsys):
    path = tmp_path / "nq+hotpotqa_train_converted.parquet"
    write_like_pandas(memsearcher_rows(FLASHRAG), path)
    truth = pq.read_schema(path).field("reward_model").type.field("ground_truth").type
    assert pa.types.is_list(truth)  # a list, not {target: ...}
    fmt, why = detect_format(str(path))
    assert fmt is DataFormat.memsearcher and "is a list" in why
    tasks = read_tasks(str(path))
    # no id in the file, and extra_info.index repeats (0, 1, 2, 0, 1): ids from the file name and row
    assert [t.id for t in tasks] == [f"nq+hotpotqa_train_converted-{i}" for i in range(5)]
    assert [t.id for t in read_tasks(str(path))] == [t.id for t in tasks]  # stable across reads
    assert tasks[0].question == "total number of death row inmates in the us?"
    assert [t.golden_answers for t in tasks] == [ex["golden_answers"] for v in FLASHRAG.values() for ex in v]
    assert tasks[0].metadata == {"data_source": "musique_re_call"}  # not env / func_schemas

    # the command that used to stop with AttributeError: 'list' object has no attribute 'get'
    assert main(["data", "convert", str(path), str(tmp_path / "train.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "(memsearcher, detected: no 'golden_answers'; 'reward_model.ground_truth' is a list)" in out
    assert "5 without an id got <file stem>-<row>" in out
    assert [t.id for t in read_tasks(str(tmp_path / "train.jsonl"))] == [t.id for t in tasks]

    # the training reader: one group id per question, none repeated
    cursor = TaskCursor(read_tasks(str(path)))
    assert len({cursor.next()[1] for _ in range(5)}) == 5


def test_memsearcher_from_searchr1_parquet_and_musique_recall(tmp_path):
    """prepare_train_data.py --searchr1_parquet (golden_answers as pandas hands them: numpy arrays)
    and prepare_musique_recall.py (ground_truth a plain list, the FlashRAG id in extra_info.id)."""
    sr1 = searchr1_rows(FLASHRAG)
    converted = [
        memsearcher_row(r["question"], np.array(r["golden_answers"], dtype=object), r["extra_info"]["index"], "train")
        for r in sr1
    ]
    path = tmp_path / "converted.parquet"
    write_like_pandas(converted, path)
    assert [t.golden_answers for t in read_tasks(str(path))] == [r["golden_answers"] for r in sr1]

    musique = [
        {
            "data_source": "musique_re_call",
            "question": ex["question"],
            "ability": "re_call",
            "reward_model": {"style": "rule", "ground_truth": ex["golden_answers"]},
            "extra_info": {"id": ex["id"], "env": ENV, "func_schemas": SCHEMAS},
        }
        for ex in FLASHRAG["hotpotqa"]
    ]
    path = tmp_path / "musique_train.parquet"
    write_like_datasets(musique, path)
    assert detect_format(str(path))[0] is DataFormat.memsearcher
    assert [t.id for t in read_tasks(str(path))] == ["5a7a0693", "5a879ab0"]


def test_answers_from_numpy_and_single_strings():
    where = "f.parquet: row 0"
    assert answers_from(np.array(["a", "b"], dtype=object), where, "x") == ["a", "b"]
    assert answers_from("Paris", where, "x") == ["Paris"]
    assert answers_from(1849, where, "x") == ["1849"]
    row = {"question": "q?", "reward_model": {"ground_truth": np.array(["x"], dtype=object), "style": "rule"}}
    assert parquet_row(row, where).golden_answers == ["x"]  # a row as pandas' iterrows hands it out


# ---- FlashRAG and ASearcher jsonl ------------------------------------------------------------


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def test_flashrag_eval_jsonl_as_released(tmp_path, capsys):
    path = tmp_path / "hotpotqa" / "dev.jsonl"
    path.parent.mkdir()
    records = [{**ex, "metadata": {"type": "comparison", "level": "hard"}} for ex in FLASHRAG["hotpotqa"]]
    write_jsonl(path, records)
    assert detect_format(str(path))[0] is DataFormat.flashrag
    tasks = read_tasks(str(path))
    assert [(t.id, t.golden_answers) for t in tasks] == [("5a7a0693", ["Arthur's Magazine"]), ("5a879ab0", ["Delhi"])]
    assert tasks[0].metadata == {"type": "comparison", "level": "hard"}
    assert main(["data", "convert", str(path), str(tmp_path / "dev.parquet")]) == 0
    assert "(flashrag, detected: jsonl with 'golden_answers')" in capsys.readouterr().out


def test_asearcher_train_jsonl_as_released(tmp_path, capsys):
    path = tmp_path / "ASearcher-Base-35k.jsonl"
    records = [
        {"idx": 0, "question": "Who founded X?", "answer": "Ann", "source": "synthetic"},
        {"qid": "q-7", "question": "When?", "answer": ["1849", "in 1849"], "aug_answer": ["mid-19th century"]},
        {"id": 12, "question": "Where?", "answer": "Paris", "source": "hotpotqa"},
        {"question": "What?", "answer": 42},
    ]
    write_jsonl(path, records)
    fmt, why = detect_format(str(path))
    assert fmt is DataFormat.asearcher and "'answer'" in why
    tasks = read_tasks(str(path))
    assert [t.id for t in tasks] == ["0", "q-7", "12", "ASearcher-Base-35k-3"]
    assert [t.golden_answers for t in tasks] == [["Ann"], ["1849", "in 1849"], ["Paris"], ["42"]]
    assert tasks[0].metadata == {"source": "synthetic"}
    assert tasks[1].metadata == {"aug_answer": ["mid-19th century"]}  # kept, not a golden answer
    assert main(["data", "convert", str(path), str(tmp_path / "train.parquet")]) == 0
    out = capsys.readouterr().out
    assert "(asearcher, detected" in out and "1 without an id got <file stem>-<row>" in out
    back = read_tasks(str(tmp_path / "train.parquet"))
    assert [(t.id, t.golden_answers) for t in back] == [(t.id, t.golden_answers) for t in tasks]
    # named explicitly (--format), the same file reads the same
    assert main(["data", "convert", "--format", "asearcher", str(path), str(tmp_path / "x.jsonl")]) == 0
    assert "(asearcher, named)" in capsys.readouterr().out


# ---- ids, streaming, refusals ----------------------------------------------------------------


def test_repeated_ids_made_unique_and_stable(tmp_path, capsys):
    path = tmp_path / "dup.jsonl"
    write_jsonl(
        path,
        [{"id": "train_0", "question": f"q{i}?", "golden_answers": ["a"]} for i in range(3)]
        + [{"question": "q3?", "golden_answers": ["a"]}],
    )
    ids = [t.id for t in read_tasks(str(path))]
    assert ids == ["train_0", "train_0#1", "train_0#2", "dup-3"]
    assert [t.id for t in read_tasks(str(path))] == ids
    assert main(["data", "convert", str(path), str(tmp_path / "o.jsonl")]) == 0
    assert "2 repeated ids got a #<row> suffix" in capsys.readouterr().out


def test_a_large_parquet_is_read_in_batches(tmp_path, monkeypatch):
    n = parquet_module.BATCH_ROWS * 2 + 100  # more than two batches
    rows = [memsearcher_row(f"question {i}?", [f"a{i}"], i) for i in range(n)]
    rows[n - 50]["question"] = None
    path = tmp_path / "big.parquet"
    write_like_pandas(rows, path)

    sizes = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        for batch in real(self, *args, **kwargs):
            sizes.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    first = read_tasks(str(path), limit=10)  # the bad row far below is never decoded
    assert [t.id for t in first] == [f"big-{i}" for i in range(10)] and sizes == [parquet_module.BATCH_ROWS]
    stream = iter_tasks(str(path))
    got = [next(stream) for _ in range(n - 50)]
    assert got[-1].question == f"question {n - 51}?" and max(sizes) <= parquet_module.BATCH_ROWS
    with pytest.raises(DataError, match=rf"{path}: row {n - 50}: 'question' must be a non-empty string"):
        next(stream)


def test_a_large_jsonl_is_read_line_by_line(tmp_path):
    path = tmp_path / "big.jsonl"
    lines = [json.dumps({"id": f"q{i}", "question": f"q{i}?", "golden_answers": ["a"]}) for i in range(20000)]
    path.write_text("\n".join(lines) + "\n{broken\n")
    assert len(read_tasks(str(path), limit=20000)) == 20000  # stops before the broken last line
    with pytest.raises(DataError, match=rf"{path}:20001: not valid JSON"):
        read_tasks(str(path))


def _parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return path


GOOD_SR1 = searchr1_rows({"nq": FLASHRAG["nq"]})[0]
GOOD_MS = memsearcher_row("q?", ["a"], 0)
BAD_ROWS = {  # format: (good row, {case: (bad row, field the message names)})
    "flashrag": (
        {"id": "x", "question": "q?", "golden_answers": ["a"]},
        {
            "question not a string": ({"id": "y", "question": 5, "golden_answers": ["a"]}, "'question'"),
            "answers missing": ({"id": "y", "question": "q?"}, "'golden_answers'"),
            "answers empty": ({"id": "y", "question": "q?", "golden_answers": []}, "'golden_answers'"),
            "answer not text": ({"id": "y", "question": "q?", "golden_answers": [None]}, "'golden_answers'"),
            "id not scalar": ({"id": ["y"], "question": "q?", "golden_answers": ["a"]}, "'id'"),
        },
    ),
    "asearcher": (
        {"idx": 1, "question": "q?", "answer": "a"},
        {
            "question not a string": ({"idx": 2, "question": ["q"], "answer": "a"}, "'question'"),
            "answer missing": ({"idx": 2, "question": "q?", "answer": None}, "'answer'"),
            "answer empty": ({"idx": 2, "question": "q?", "answer": []}, "'answer'"),
            "answer an object": ({"idx": 2, "question": "q?", "answer": {"text": "a"}}, "'answer'"),
            "idx not scalar": ({"idx": {"n": 2}, "question": "q?", "answer": "a"}, "'idx'"),
        },
    ),
    "searchr1": (
        GOOD_SR1,
        {
            "question missing": ({**GOOD_SR1, "question": None}, "'question'"),
            "answers empty": ({**GOOD_SR1, "golden_answers": []}, "'golden_answers'"),
            "answers missing": (
                {
                    **GOOD_SR1,
                    "golden_answers": None,
                    "reward_model": {"style": "rule", "ground_truth": {"target": None}},
                },
                "'reward_model.ground_truth.target'",
            ),
        },
    ),
    "memsearcher": (
        GOOD_MS,
        {
            "question missing": ({**GOOD_MS, "question": None}, "'question'"),
            "ground_truth empty": (memsearcher_row("q?", [], 0), "'reward_model.ground_truth'"),
            "ground_truth missing": (
                {**GOOD_MS, "reward_model": {"ground_truth": None, "style": "rule"}},
                "'reward_model.ground_truth'",
            ),
        },
    ),
}
BAD_CASES = [(fmt, case) for fmt, (_, cases) in BAD_ROWS.items() for case in cases]


@pytest.mark.parametrize("fmt,case", BAD_CASES)
def test_a_bad_row_is_refused_naming_file_row_and_field(fmt, case, tmp_path):
    good, cases = BAD_ROWS[fmt]
    bad, field = cases[case]
    rows = [good, dict(good), bad, dict(good)]
    if fmt in ("flashrag", "asearcher"):
        path, where = tmp_path / "data.jsonl", "data.jsonl:3: "
        write_jsonl(path, rows)
    else:
        path, where = _parquet(tmp_path / "data.parquet", rows), "data.parquet: row 2: "
    with pytest.raises(DataError) as e:
        read_tasks(str(path))
    assert str(e.value).startswith(f"{tmp_path}/{where}") and field in str(e.value), str(e.value)
    with pytest.raises(DataError):
        read_tasks(str(path), fmt)  # named, the same refusal


def test_ground_truth_of_an_unknown_shape_is_refused(tmp_path):
    odd = _parquet(
        tmp_path / "odd.parquet",
        [{"question": "q?", "reward_model": {"style": "rule", "ground_truth": {"answers": ["a"]}}}],
    )
    with pytest.raises(DataError, match=r"row 0: 'reward_model.ground_truth' has an unknown shape"):
        read_tasks(str(odd))
    number = _parquet(tmp_path / "number.parquet", [{"question": "q?", "reward_model": {"ground_truth": 7}}])
    with pytest.raises(DataError, match=r"row 0: 'reward_model.ground_truth' has an unknown shape \(int\)"):
        read_tasks(str(number))
    none = _parquet(tmp_path / "none.parquet", [{"query": "q?", "label": "a"}])
    with pytest.raises(
        DataError, match=r"not a question file: no 'golden_answers' and no 'reward_model'.*query, label"
    ):
        read_tasks(str(none))


def test_a_refused_conversion_leaves_no_output(tmp_path, capsys):
    rows = [memsearcher_row(f"q{i}?", ["a"], i) for i in range(10)]
    rows[7]["reward_model"]["ground_truth"] = np.array([], dtype=object)
    src = tmp_path / "ms.parquet"
    write_like_pandas(rows, src)
    for out in ("out.jsonl", "out.parquet"):
        assert main(["data", "convert", str(src), str(tmp_path / out)]) == 2
        assert f"{src}: row 7: 'reward_model.ground_truth'" in capsys.readouterr().err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ms.parquet"]
    assert main(["data", "convert", "--limit", "5", str(src), str(tmp_path / "out.jsonl")]) == 0  # row 7 unread
    assert len(read_tasks(str(tmp_path / "out.jsonl"))) == 5


def test_format_from_content_when_the_name_says_nothing(tmp_path):
    sr1 = tmp_path / "train.data"
    write_like_datasets(searchr1_rows(FLASHRAG), sr1)
    assert detect_format(str(sr1))[0] is DataFormat.searchr1
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(DataError, match="cannot tell the format"):
        read_tasks(str(text))
