"""Malformed data files and config values fail with the file and line (or key) named, both from
the readers and through the command line (exit status 2, one line on stderr, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from areal_mem.config import ConfigError, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOOD_PASSAGE = b'{"id": "0", "contents": "\\"Title\\"\\ntext"}\n'
GOOD_QUESTION = b'{"id": "q0", "question": "who?", "golden_answers": ["x"]}\n'
DEEP = b"[" * 100_000 + b"]" * 100_000


def cli(*argv: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AREAL_MEM_")}
    return subprocess.run(
        [sys.executable, "-m", "areal_mem.app.cli", *argv],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=env,
    )


def assert_clean_failure(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    for n in needles:
        assert n in r.stderr, (n, r.stderr[-2000:])


CORPUS_LINES = {
    "truncated JSON": (b'{"id": "1", "contents": "x"', "not valid JSON"),
    "not UTF-8": (b'{"id": "1", "contents": "\xff\xfe"}', "not valid JSON"),
    "nested too deeply": (DEEP, "not valid JSON"),
    "not an object": (b'["1", "x"]', "expected a JSON object"),
    "no id": (b'{"contents": "x"}', "field 'id'"),
    "contents not text": (b'{"id": "1", "contents": 5}', "field 'contents'"),
}
QUESTION_LINES = {
    "truncated JSON": (b'{"id": 1, "question": "q"', "not valid JSON"),
    "not UTF-8": (b'{"id": 1, "question": "\xc3\x28", "golden_answers": ["a"]}', "not UTF-8"),
    "nested too deeply": (DEEP, "not valid JSON"),
    "no question": (b'{"id": 1, "golden_answers": ["a"]}', "'question'"),
    "answers not a list": (b'{"id": 1, "question": "q", "golden_answers": {"a": 1}}', "'golden_answers'"),
}


@pytest.mark.parametrize(
    "reader,case", [("corpus", c) for c in sorted(CORPUS_LINES)] + [("flashrag", c) for c in sorted(QUESTION_LINES)]
)
def test_a_corrupt_line_names_file_and_line(reader, case, tmp_path):
    from areal_mem.data import DataError, read_tasks
    from areal_mem.retriever.corpus import CorpusError, corpus_checksum

    lines, good, read, error = {
        "corpus": (CORPUS_LINES, GOOD_PASSAGE, corpus_checksum, CorpusError),
        "flashrag": (QUESTION_LINES, GOOD_QUESTION, read_tasks, DataError),
    }[reader]
    line, needle = lines[case]
    path = tmp_path / "data.jsonl"
    path.write_bytes(good * 2 + line + b"\n" + good)
    with pytest.raises(error) as e:
        read(str(path))
    assert str(e.value).startswith(f"{path}:3: ") and needle in str(e.value)


def test_bad_data_files_through_the_command_line(tmp_path):
    """Question files through `data convert` (a corrupt corpus through `retriever build`: tests/retriever)."""
    questions = tmp_path / "q.jsonl"
    questions.write_bytes(GOOD_QUESTION * 3 + b"\xff\xfe not text\n")
    assert_clean_failure(
        cli("data", "convert", str(questions), str(tmp_path / "q.parquet")), f"{questions}:4: not UTF-8"
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "searchr1.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"question": "q", "golden_answers": ["a"]}, {"question": None, "golden_answers": ["b"]}]),
        str(parquet),
    )
    assert_clean_failure(
        cli("data", "convert", str(parquet), str(tmp_path / "out.jsonl")), f"{parquet}: row 1: 'question'"
    )
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1 this is not parquet")
    assert_clean_failure(
        cli("data", "convert", str(garbage), str(tmp_path / "o.jsonl")), f"{garbage}: not a readable parquet file"
    )


def test_bad_rows_of_each_released_format_through_the_command_line(tmp_path):
    """MemSearcher's parquet (a list ground_truth), Search-R1's (nested target), ASearcher's jsonl:
    a bad row is one line naming file, row and field; a good file of each converts."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    def memsearcher(answers):
        truth = np.array(answers, dtype=object)
        return {
            "data_source": "musique_re_call",
            "question": "q?",
            "ability": "re_call",
            "reward_model": {"ground_truth": truth, "style": "rule"},
            "extra_info": {"env": "", "func_schemas": "[]", "index": 0, "split": "train"},
        }

    def searchr1(question):
        return {
            "id": "train_0",
            "question": question,
            "golden_answers": ["a"],
            "data_source": "nq",
            "prompt": [{"role": "user", "content": "..."}],
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": ["a"]}},
            "extra_info": {"split": "train", "index": 0},
        }

    ms = tmp_path / "memsearcher.parquet"
    pq.write_table(pa.Table.from_pylist([memsearcher(["a"]), memsearcher([])]), str(ms))
    sr1 = tmp_path / "searchr1.parquet"
    pq.write_table(pa.Table.from_pylist([searchr1("q?"), searchr1("q2?"), searchr1(None)]), str(sr1))
    asr = tmp_path / "asearcher.jsonl"
    asr.write_text('{"idx": 0, "question": "q?", "answer": "a"}\n{"idx": 1, "question": "q?"}\n')
    for path, needle in (
        (ms, f"{ms}: row 1: 'reward_model.ground_truth' must be a non-empty list"),
        (sr1, f"{sr1}: row 2: 'question' must be a non-empty string"),
        (asr, f"{asr}:2: 'answer' must be a non-empty list"),
    ):
        r = cli("data", "convert", str(path), str(tmp_path / "out.jsonl"))
        assert_clean_failure(r, needle)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "out.jsonl").exists()
    pq.write_table(pa.Table.from_pylist([memsearcher(["a"])]), str(ms))
    r = cli("data", "convert", str(ms), str(tmp_path / "out.jsonl"))
    assert r.returncode == 0 and "(memsearcher, detected" in r.stdout, r.stderr


CONFIGS = {  # the YAML, the line at fault, what the message must say
    "wrong type": ("model:\n  path: /m\nlearner:\n  lr: 1e-6\n  steps: many\n", 5, "key 'learner.steps' expects int"),
    "unknown key": (
        "model:\n  path: /m\nrollout:\n  group_size: 5\n  max_turnz: 3\n",
        5,
        "unknown key 'rollout.max_turnz'; allowed keys under 'rollout'",
    ),
    "bad enum": (
        "model:\n  path: /m\nretriever:\n  kind: sparse\n",
        4,
        "key 'retriever.kind' expects IndexKind: dense|bm25",
    ),
    "unknown section": ("model:\n  path: /m\nlerner:\n  lr: 1\n", 3, "unknown key 'lerner'"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_a_bad_config_value_names_file_line_and_key(case, tmp_path):
    text, line, needle = CONFIGS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config([str(path)])
    assert str(e.value).startswith(f"{path}:{line}: ") and needle in str(e.value), str(e.value)


def test_bad_configs_through_areal_mem_train(tmp_path):
    for case, (text, line, needle) in CONFIGS.items():
        path = tmp_path / f"{case.replace(' ', '_')}.yaml"
        path.write_text(text + f"run_dir: {tmp_path}/run\n")
        r = cli("train", "--config", str(path))
        assert_clean_failure(r, "areal-mem train: config error", f"{path}:{line}: ", needle)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "run").exists()  # nothing started
    broken = tmp_path / "broken.yaml"
    broken.write_text("model:\n  path: /m\n learner: [\n")
    assert_clean_failure(cli("train", "--config", str(broken)), f"{broken}: not valid YAML", "line 3")
    assert_clean_failure(cli("train", "--config", str(broken).replace("broken", "missing")), "does not exist")
    assert_clean_failure(
        cli("train", "model.path=/m", "learner.lr=fast"), "command-line override 'learner.lr=fast'", "learner.lr"
    )
