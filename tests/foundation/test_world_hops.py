"""Bridge questions of more than two hops (`world.hops`): valid chains through the world's links,
one needed passage a hop, the right answer, homonym distractors on the way; two hops unchanged."""

import json
import os
import random

import pytest

from areal_mem.app.world import build_world, check_built_world, world_filters
from areal_mem.app.world.entities import Entity
from areal_mem.app.world.questions import BRIDGE, NOUNS, chain_specs, multi_hop_questions

COUNTRY_CHAINS = ["person.birthplace.country", "org.headquarters.country"]


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_chain_specs_end_in_the_chosen_two_hop_chains():
    assert [s.name for s in chain_specs(2, COUNTRY_CHAINS)] == ["org.headquarters.country", "person.birthplace.country"]
    assert [s.name for s in chain_specs(3, COUNTRY_CHAINS)] == [
        "org.founder.birthplace.country",
        "person.employer.headquarters.country",
        "work.creator.birthplace.country",
    ]
    assert [s.name for s in chain_specs(4, COUNTRY_CHAINS)] == [
        "org.founder.employer.headquarters.country",
        "person.employer.founder.birthplace.country",
        "work.creator.employer.headquarters.country",
    ]
    assert [s.name for s in chain_specs(6, COUNTRY_CHAINS)] == [
        "org.founder.employer.founder.employer.headquarters.country",
        "person.employer.founder.employer.founder.birthplace.country",
        "work.creator.employer.founder.employer.headquarters.country",
    ]
    spec = chain_specs(4, COUNTRY_CHAINS)[2]
    assert (spec.hops, spec.kinds, spec.final) == (
        4,
        ("work", "person", "org", "city"),
        ("org", "headquarters", "country"),
    )


def _graph():
    """A hand-made world: a work by P1, who was born in C1 and works for O1 (founded by P2,
    headquartered in C2); P2 born in C3, with no employer; O2 founded by P3 who works for O2."""
    e = {
        "W": Entity("work", "W", {"creator": "P1", "kind": "novel", "year": 1900}),
        "P1": Entity("person", "P1", {"born": 1870, "birthplace": "C1", "employer": "O1"}),
        "O1": Entity("org", "O1", {"founder": "P2", "headquarters": "C2", "founded": 1880}),
        "P2": Entity("person", "P2", {"born": 1850, "birthplace": "C3"}),
        "O2": Entity("org", "O2", {"founder": "P3", "headquarters": "C3", "founded": 1890}),
        "P3": Entity("person", "P3", {"born": 1860, "birthplace": "C1", "employer": "O2"}),
    }
    for i, k in enumerate(("K1", "K2", "K3"), 1):
        e[f"C{i}"] = Entity("city", f"C{i}", {"country": k, "founded": 1000})
        e[k] = Entity("country", k, {"capital": f"C{i}"})
    return e


def _texts(start, spec_links, final):
    """Every phrasing the builder may give a chain: one noun phrase a link before the last, then
    a BRIDGE phrasing of the last two hops, the first letter capitalised."""
    subjects = [start]
    for kind_link in spec_links:
        subjects = [n.format(s=s) for s in subjects for n in NOUNS[kind_link]]
    texts = [p.format(s=s) for s in subjects for p in BRIDGE[final]]
    return {t[0].upper() + t[1:] for t in texts}


def test_multi_hop_questions_follow_the_links_and_skip_broken_or_circular_chains():
    e = _graph()
    qs = multi_hop_questions(random.Random(0), list(e.values()), e, 3, COUNTRY_CHAINS)
    got = {q.supporting[0]: q for q in qs}
    assert sorted(got) == ["O1", "O2", "P1", "P3", "W"]
    w = got["W"]  # work.creator.birthplace.country
    assert (w.golden_answers, w.supporting, w.bridge, w.chain, w.hops, w.type) == (
        ["K1"],
        ["W", "P1", "C1"],
        "P1",
        ["P1", "C1"],
        3,
        "bridge",
    )
    assert w.question in _texts("W", [("work", "creator")], ("person", "birthplace", "country"))
    assert "P1" not in w.question and "C1" not in w.question  # only the start is named
    p1 = got["P1"]  # person.employer.headquarters.country
    assert (p1.golden_answers, p1.supporting) == (["K2"], ["P1", "O1", "C2"])
    assert p1.question in _texts("P1", [("person", "employer")], ("org", "headquarters", "country"))
    assert (got["O1"].golden_answers, got["O1"].supporting) == (["K3"], ["O1", "P2", "C3"])
    # P3 -> O2 -> founder P3 again: the 4-hop chain person.employer.founder.birthplace.country is
    # circular and skipped, as is O2 -> P3 -> O2
    qs4 = multi_hop_questions(random.Random(0), list(e.values()), e, 4, COUNTRY_CHAINS)
    # (O1 -> P2 has no employer; P2 has none to start from)
    assert sorted((q.supporting[0], tuple(q.supporting), q.golden_answers[0]) for q in qs4) == [
        ("P1", ("P1", "O1", "P2", "C3"), "K3"),
        ("W", ("W", "P1", "O1", "C2"), "K2"),
    ]
    w4 = next(q for q in qs4 if q.supporting[0] == "W")
    assert w4.question in _texts("W", [("work", "creator"), ("person", "employer")], ("org", "headquarters", "country"))


@pytest.fixture(scope="module")
def hop_worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("hops")
    out = {}
    for hops in (2, 3, 4, 6):
        folder = str(root / f"h{hops}")
        m = build_world(folder, seed=0, passages=800, questions=600, bridge_chains=COUNTRY_CHAINS, hops=hops)
        out[hops] = (folder, m)
    return out


@pytest.mark.parametrize("hops", [3, 4, 6])
def test_every_hop_of_a_built_world_needs_its_passage(hop_worlds, hops):
    folder, manifest = hop_worlds[hops]
    corpus = {r["id"]: r["contents"] for r in read_jsonl(os.path.join(folder, "corpus.jsonl"))}
    titles = {i: c.partition("\n")[0].strip('"') for i, c in corpus.items()}
    homonyms = {t.rsplit(" (", 1)[0] for t in titles.values() if t.endswith(")") and " (" in t}
    bridges = [q for s in ("train", "dev", "test") for q in read_jsonl(os.path.join(folder, f"{s}.jsonl"))]
    bridges = [q for q in bridges if q["type"] == "bridge"]
    assert len(bridges) >= 30 and manifest["filters"]["hops"] == hops
    with_homonym = 0
    for q in bridges:
        names = [titles[i] for i in q["supporting_ids"]]
        assert q["hops"] == len(names) == hops and q["chain"] == names[1:] and q["bridge"] == names[1]
        assert len(set(names)) == hops  # a new passage every hop
        assert names[0] in q["question"] and not any(n in q["question"] for n in names[1:])
        for here, nxt in zip(names, names[1:]):  # each passage names the next hop's entity
            text = corpus[q["supporting_ids"][names.index(here)]].partition("\n")[2]
            assert nxt in text, (q["question"], here, nxt)
        last = corpus[q["supporting_ids"][-1]].partition("\n")[2]
        assert q["golden_answers"][0] in last  # the answer: the last city's country
        assert not any(q["golden_answers"][0] in corpus[i] for i in q["supporting_ids"][:-1])
        assert q["question"][0].isupper() and q["question"].endswith("?")
        with_homonym += any(n in homonyms for n in names)
    assert with_homonym > 0  # distractor homonyms stand on the chains


def test_two_hops_is_the_world_of_before(hop_worlds, tmp_path):
    folder, manifest = hop_worlds[2]
    plain = build_world(str(tmp_path), seed=0, passages=800, questions=600, bridge_chains=COUNTRY_CHAINS)
    assert manifest["sha256"] == plain["sha256"] and "hops" not in manifest["filters"]
    assert all("chain" not in q for q in read_jsonl(os.path.join(folder, "train.jsonl")))
    four = hop_worlds[4][1]
    assert four["sha256"]["corpus"] == plain["sha256"]["corpus"]  # the same passages
    assert four["sha256"]["train"] != plain["sha256"]["train"]


def test_a_built_world_of_other_hops_is_refused(hop_worlds):
    types = ["single", "bridge", "comparison"]
    four, two = hop_worlds[4][0], hop_worlds[2][0]
    check_built_world(four, world_filters(types, [], COUNTRY_CHAINS, 4))
    with pytest.raises(ValueError, match=r"world.hops: the world in .* was built with 4, the config asks for 2"):
        check_built_world(four, world_filters(types, [], COUNTRY_CHAINS))
    with pytest.raises(ValueError, match=r"world.hops: the world in .* was built with 2, the config asks for 6"):
        check_built_world(two, world_filters(types, [], COUNTRY_CHAINS, 6))


def test_bad_hops_are_refused_by_key(tmp_path):
    with pytest.raises(ValueError, match=r"world.hops must be an integer in \[2, 8\], got 1"):
        build_world(str(tmp_path / "a"), passages=100, questions=20, hops=1)
    with pytest.raises(ValueError, match=r"world.hops must be an integer in \[2, 8\], got 9"):
        build_world(str(tmp_path / "a"), passages=100, questions=20, hops=9)
    with pytest.raises(ValueError, match="world.hops is 3 but world.question_types .* has no bridge"):
        build_world(str(tmp_path / "b"), passages=100, questions=20, question_types=["single"], hops=3)
