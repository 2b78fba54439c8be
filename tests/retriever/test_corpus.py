import gzip
import json

import pytest

from areal_mem.retriever.corpus import CorpusError, CorpusReader, corpus_checksum, split_title


def _write(path, lines):
    path.write_text("".join(lines))
    return str(path)


def test_plain_and_gzip_read_the_same_passages_and_checksum(tmp_path):
    lines = [json.dumps({"id": str(i), "contents": f'"T{i}"\ntext {i}'}) + "\n" for i in range(25)]
    plain = _write(tmp_path / "c.jsonl", lines)
    gz = str(tmp_path / "c.jsonl.gz")
    with gzip.open(gz, "wt") as f:
        f.writelines(lines)
    a, b = CorpusReader(plain), CorpusReader(gz)
    pa_, pb = list(a), list(b)
    assert pa_ == pb and len(pa_) == 25
    assert a.checksum == b.checksum and a.checksum.startswith("sha256:")
    assert pa_[3].title == "T3" and pa_[3].text == "text 3"
    assert [len(c) for c in CorpusReader(plain).chunks(10)] == [10, 10, 5]
    assert corpus_checksum(plain) == (a.checksum, 25)


def test_checksum_changes_with_content(tmp_path):
    one = _write(tmp_path / "a.jsonl", ['{"id": "0", "contents": "x"}\n'])
    two = _write(tmp_path / "b.jsonl", ['{"id": "0", "contents": "y"}\n'])
    assert corpus_checksum(one)[0] != corpus_checksum(two)[0]


@pytest.mark.parametrize(
    "bad,needle",
    [
        ('{"id": "1", "contents": "ok"', "not valid JSON"),
        ('["a"]', "expected a JSON object"),
        ('{"contents": "no id"}', "field 'id'"),
        ('{"id": "2", "contents": 7}', "field 'contents'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad, needle):
    path = _write(tmp_path / "bad.jsonl", ['{"id": "0", "contents": "fine"}\n', "\n", bad + "\n"])
    with pytest.raises(CorpusError) as e:
        list(CorpusReader(path))
    assert f"{path}:3:" in str(e.value) and needle in str(e.value)


def test_integer_ids_become_strings_and_missing_file_is_clear(tmp_path):
    path = _write(tmp_path / "c.jsonl", ['{"id": 5, "contents": "x"}\n'])
    assert list(CorpusReader(path))[0].id == "5"
    with pytest.raises(CorpusError, match="cannot open corpus"):
        list(CorpusReader(str(tmp_path / "missing.jsonl")))


def test_split_title():
    assert split_title('"Paris"\nThe capital.') == ("Paris", "The capital.")
    assert split_title("no title line") == ("", "no title line")
