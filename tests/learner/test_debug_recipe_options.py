"""The debug recipe's levers: world question filters and the oracle's fact-sentence memory."""

from __future__ import annotations

import json
import os

import pytest

from areal_mem.app.world import build_world, check_built_world, world_filters, world_size
from areal_mem.app.world.entities import OCCUPATIONS
from areal_mem.config import load_config, load_run
from areal_mem.data.task import Task
from areal_mem.rollout.oracle import fact_sentences

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_question_filters_keep_only_the_chosen_facts(tmp_path):
    m = build_world(
        str(tmp_path),
        seed=1,
        passages=400,
        questions=200,
        question_types=["single"],
        single_attributes=["person.occupation", "city.country"],
    )
    assert m["questions"]["train"]["single"] == m["questions"]["train"]["total"] > 0
    corpus = {r["id"]: r["contents"] for r in _rows(tmp_path / "corpus.jsonl")}
    for split in ("train", "dev", "test"):
        for q in _rows(tmp_path / f"{split}.jsonl"):
            assert q["type"] == "single" and q["hops"] == 1
            passage = corpus[q["supporting_ids"][0]]
            assert q["golden_answers"][0] in passage
            if "country" in q["question"]:  # a city's country
                assert "city" in passage and q["golden_answers"][0] not in OCCUPATIONS
            else:
                assert q["golden_answers"][0] in OCCUPATIONS


def test_default_world_is_unchanged_by_the_filters(tmp_path):
    a = build_world(str(tmp_path / "a"), seed=2, passages=200, questions=150)
    b = build_world(
        str(tmp_path / "b"),
        seed=2,
        passages=200,
        questions=150,
        question_types=["single", "bridge", "comparison"],
        single_attributes=[],
        bridge_chains=[],
    )
    assert a["sha256"] == b["sha256"]
    assert a["questions"]["train"]["bridge"] > 0 and a["questions"]["train"]["comparison"] > 0


def test_bridge_chains_keep_only_the_chosen_chains(tmp_path):
    chains = ["person.birthplace.country", "org.headquarters.country"]
    m = build_world(str(tmp_path), seed=1, passages=400, questions=300, question_types=["bridge"], bridge_chains=chains)
    assert m["questions"]["train"]["bridge"] == m["questions"]["train"]["total"] > 0
    corpus = {r["id"]: r["contents"] for r in _rows(tmp_path / "corpus.jsonl")}
    for split in ("train", "dev", "test"):
        for q in _rows(tmp_path / f"{split}.jsonl"):
            first, second = (corpus[i] for i in q["supporting_ids"])
            # first hop names the bridge, a city; second hop (the city's passage) names the country
            assert q["type"] == "bridge" and q["bridge"] in first and q["golden_answers"][0] in second
            assert "country" in q["question"] and "city" in second
    with pytest.raises(ValueError, match="world.bridge_chains.*person.birthplace.height"):
        build_world(str(tmp_path / "x"), passages=100, questions=20, bridge_chains=["person.birthplace.height"])
    with pytest.raises(ValueError, match="world.bridge_chains is .* has no bridge"):
        build_world(str(tmp_path / "y"), passages=100, questions=20, question_types=["single"], bridge_chains=chains)


def test_a_built_world_is_checked_against_the_filters_asked_for(tmp_path):
    """A run that finds a world built must not train on other questions than its config names."""
    chains = ["person.birthplace.country"]
    m = build_world(str(tmp_path), seed=1, passages=200, questions=60, bridge_chains=chains)
    assert m["filters"] == {
        "question_types": ["bridge", "comparison", "single"],
        "single_attributes": [],
        "bridge_chains": chains,
    }
    check_built_world(str(tmp_path), world_filters(["single", "bridge", "comparison"], [], chains))  # the same
    check_built_world(str(tmp_path), world_filters(["comparison", "single", "bridge", "single"], [], chains * 2))
    with pytest.raises(ValueError, match=r"world.bridge_chains: the world in .* was built with \['person"):
        check_built_world(str(tmp_path), world_filters(["single", "bridge", "comparison"], [], []))
    with pytest.raises(ValueError, match="world.question_types"):
        check_built_world(str(tmp_path), world_filters(["single"], [], chains))


def test_a_run_that_does_not_build_the_world_still_refuses_one_of_other_filters(tmp_path):
    """`world.build: false` names a world built elsewhere; the config's filters still say what
    the run trains on, so a world built with others is refused before anything starts."""
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import ConfigError

    build_world(str(tmp_path / "world"), seed=1, passages=200, questions=60)  # every type; the recipe asks single
    cfg = load_run([os.path.join(REPO, "configs", "debug_cpu.yaml")], [f"run_dir={tmp_path}", "world.build=false"])
    with pytest.raises(ConfigError, match="world.question_types: the world in"):
        TrainPipeline(cfg, evaluate=False).prepare()


def test_a_run_that_builds_its_world_refuses_one_built_from_another_seed(tmp_path):
    """A new seed in an old run dir would otherwise resume on the old seed's world; a world
    built elsewhere (`world.build: false`) may serve any run seed."""
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import ConfigError

    types, attrs = ["single"], ["person.occupation", "city.country"]
    build_world(
        str(tmp_path / "world"), seed=0, passages=200, questions=60, question_types=types, single_attributes=attrs
    )
    check_built_world(str(tmp_path / "world"), world_filters(types, attrs, []), seed=0)
    with pytest.raises(ValueError, match="world.seed: the world in .* was built from seed 0, the config asks for 1"):
        check_built_world(str(tmp_path / "world"), world_filters(types, attrs, []), seed=1)
    cfg = load_run([os.path.join(REPO, "configs", "debug_cpu.yaml")], [f"run_dir={tmp_path}", "seed=1"])
    with pytest.raises(ConfigError, match="world.seed"):
        TrainPipeline(cfg, evaluate=False).prepare()
    shared = load_run(
        [os.path.join(REPO, "configs", "debug_cpu.yaml")],
        [
            f"run_dir={tmp_path}",
            "seed=1",
            "world.build=false",
            "model.build=false",
            "retriever.urls=[http://127.0.0.1:9]",
        ],
    )
    TrainPipeline(shared, evaluate=False).prepare()  # no error: the world is not this run's to build


def test_a_run_that_builds_its_world_refuses_one_of_other_sizes(tmp_path):
    """A recipe that moved to a larger world (the paper recipe went from 4,000 passages to 8,000)
    would otherwise resume an old run dir on the smaller world; a manifest written before the
    sizes were recorded is checked for its passages by recomputing the seed's entity count."""
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import ConfigError

    types, attrs = ["single"], ["person.occupation", "city.country"]
    world = str(tmp_path / "world")
    manifest = build_world(world, seed=0, passages=200, questions=60, question_types=types, single_attributes=attrs)
    assert manifest["size"] == world_size(200, 60, 0.1, 0.1)
    filters = world_filters(types, attrs, [])
    check_built_world(world, filters, seed=0, size=world_size(200, 60, 0.1, 0.1))
    with pytest.raises(
        ValueError, match=r"world.passages: the world in .* was built with 200, the config asks for 400"
    ):
        check_built_world(world, filters, seed=0, size=world_size(400, 60, 0.1, 0.1))
    with pytest.raises(ValueError, match=r"world.questions: .* built with 60, the config asks for 80"):
        check_built_world(world, filters, seed=0, size=world_size(200, 80, 0.1, 0.1))
    with pytest.raises(ValueError, match=r"world.test_fraction: .* built with 0.1, the config asks for 0.2"):
        check_built_world(world, filters, seed=0, size=world_size(200, 60, 0.1, 0.2))
    # a manifest of before: its passages still tell 200 from 400 through the seed's entity count
    path = os.path.join(world, "manifest.json")
    old = {k: v for k, v in manifest.items() if k != "size"}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(old, f)
    check_built_world(world, filters, seed=0, size=world_size(200, 80, 0.1, 0.2))  # only passages are known
    with pytest.raises(
        ValueError, match=r"world.passages: .* built with another size \(\d+ passages\), the config asks for 400"
    ):
        check_built_world(world, filters, seed=0, size=world_size(400, 60, 0.1, 0.1))
    cfg = load_run(
        [os.path.join(REPO, "configs", "debug_cpu.yaml")],
        [f"run_dir={tmp_path}", "world.question_types=[single]", "world.passages=400"],
    )
    with pytest.raises(ConfigError, match="world.passages"):
        TrainPipeline(cfg, evaluate=False).prepare()


def test_bad_filters_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="world.question_types"):
        build_world(str(tmp_path), passages=100, questions=20, question_types=["trivia"])
    with pytest.raises(ValueError, match="world.single_attributes.*person.height"):
        build_world(str(tmp_path), passages=100, questions=20, single_attributes=["person.height"])


def test_fact_sentences_keep_what_the_question_needs():
    text = (
        "Ada Lind (born 1901) is a poet from Kest. She worked for Orra Guild for many years. "
        "Little is known about her early education."
    )
    single = Task("q", "What did Ada Lind do?", ["poet"], {"type": "single"})
    assert fact_sentences(text, single) == "Ada Lind (born 1901) is a poet from Kest."
    bridge = Task(
        "q",
        "Who founded the organisation Ada Lind worked for?",
        ["Bo Tarr"],
        {"type": "bridge", "bridge": "Orra Guild"},
    )
    assert fact_sentences(text, bridge) == "She worked for Orra Guild for many years."
    # the second hop, the bridge's own passage: every sentence names it; the answer's one is kept
    org = "Orra Guild is a guild founded in 1820 by Bo Tarr. Orra Guild is headquartered in Kest."
    assert fact_sentences(org, bridge, "Orra Guild") == "Orra Guild is a guild founded in 1820 by Bo Tarr."
    where = Task("q", "Where is the employer of Ada Lind?", ["Kest"], {"type": "bridge", "bridge": "Orra Guild"})
    assert fact_sentences(org, where, "Orra Guild") == "Orra Guild is headquartered in Kest."
    assert fact_sentences(org, where) == org  # not told it is the bridge's passage: both name it
    comparison = Task("q", "Who was born first, Ada Lind or Cy Op?", ["Cy Op"], {"type": "comparison"})
    assert fact_sentences(text, comparison) == "Ada Lind (born 1901) is a poet from Kest."
    unrelated = Task("q", "Where is Zed?", ["Zed City"], {"type": "single"})
    assert fact_sentences(text, unrelated) == text  # nothing matches: the whole passage


def test_debug_recipe_loads_with_its_options():
    cfg = load_run([os.path.join(REPO, "configs", "debug_cpu.yaml")], ["run_dir=/tmp/x"])
    assert [t.value for t in cfg.world.question_types] == ["single"]
    assert list(cfg.world.single_attributes) == ["person.occupation", "city.country"]
    with pytest.raises(Exception, match="question_types"):
        load_config(
            [os.path.join(REPO, "configs", "debug_cpu.yaml")], ["run_dir=/tmp/x", "world.question_types=[trivia]"]
        )


def test_a_recipe_imports_its_model_from_model_source(tmp_path, tiny_model_dir):
    """`model.source` names a model to import into `model.path` when none is there (a .gguf file,
    a transformers folder or a known name), recorded beside it; it excludes `model.build`, and a
    source that cannot be imported stops the run before anything starts."""
    from areal_mem.app.model_import import RECORD
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import ConfigError

    types, attrs = ["single"], ["person.occupation", "city.country"]
    build_world(
        str(tmp_path / "world"), seed=0, passages=200, questions=60, question_types=types, single_attributes=attrs
    )
    base = [
        f"run_dir={tmp_path}",
        "world.build=false",
        "model.build=false",
        "retriever.urls=[http://127.0.0.1:9]",
        "rollout.prompt_style=released",
    ]
    cfg = load_run([os.path.join(REPO, "configs", "debug_cpu.yaml")], [*base, f"model.source={tiny_model_dir}"])
    TrainPipeline(cfg, evaluate=False).prepare()
    assert os.path.exists(os.path.join(cfg.model.path, "config.json"))
    assert os.path.exists(os.path.join(cfg.model.path, RECORD))
    TrainPipeline(cfg, evaluate=False).prepare()  # there already: not imported again
    both = load_run(
        [os.path.join(REPO, "configs", "debug_cpu.yaml")],
        [*base, f"model.source={tiny_model_dir}", "model.build=true", f"model.path={tmp_path / 'm2'}"],
    )
    with pytest.raises(ConfigError, match="model.source and model.build both"):
        TrainPipeline(both, evaluate=False).prepare()
    missing = load_run(
        [os.path.join(REPO, "configs", "debug_cpu.yaml")],
        [*base, f"model.source={tmp_path / 'nope'}", f"model.path={tmp_path / 'm3'}"],
    )
    with pytest.raises(ConfigError, match="model.source=.*no such file or folder"):
        TrainPipeline(missing, evaluate=False).prepare()
