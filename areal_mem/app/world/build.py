"""Write a synthetic world: corpus.jsonl, train/dev/test.jsonl and manifest.json.

Entities (not just questions) are split between train, dev and test, so a held-out
question asks about entities that no training question names: its answer can only
come from search. Everything is drawn from one seeded RNG, so a seed gives
byte-identical files.
"""

from __future__ import annotations

import json
import os
import random
from typing import Dict, List, NoReturn, Optional, Sequence

from areal_mem.digest import file_sha256

from .entities import Entity, make_entities
from .questions import (
    MAX_HOPS,
    MIN_HOPS,
    SHARES,
    Question,
    check_attributes,
    check_chains,
    questions_for_split,
    type_shares,
)
from .render import render_passage

SPLITS = ("train", "dev", "test")


def build_world(
    out_dir: str,
    seed: int = 0,
    passages: int = 2000,
    questions: int = 5000,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    question_types: Optional[Sequence[str]] = None,
    single_attributes: Optional[Sequence[str]] = None,
    bridge_chains: Optional[Sequence[str]] = None,
    hops: int = 2,
) -> Dict[str, object]:
    """Build the world into `out_dir` and return its manifest. `question_types` (default all)
    restricts the questions to those types, `single_attributes` (`kind.attr`, default all) the
    facts that single-hop questions ask for, `bridge_chains` (`kind.link.attr`, default all) the
    two-hop chains of bridge questions, or with `hops` above 2 the last two hops of their
    chains (`questions.multi_hop_questions`). A world of 2 hops is the same bytes as before the
    option existed, so the recipes' worlds and every report measured on them stay."""
    shares = type_shares(question_types)
    attributes = check_attributes(single_attributes)
    chains = check_chains(bridge_chains)
    if chains and "bridge" not in shares:
        raise ValueError(f"world.bridge_chains is {chains} but world.question_types {list(shares)} has no bridge")
    if isinstance(hops, bool) or not isinstance(hops, int) or not MIN_HOPS <= hops <= MAX_HOPS:
        raise ValueError(f"world.hops must be an integer in [{MIN_HOPS}, {MAX_HOPS}], got {hops!r}")
    if hops != 2 and "bridge" not in shares:
        raise ValueError(f"world.hops is {hops} but world.question_types {list(shares)} has no bridge")
    if passages < 50:
        raise ValueError(f"world.passages must be at least 50, got {passages}")
    if questions < 3:
        raise ValueError(f"world.questions must be at least 3, got {questions}")
    if not (0 < dev_fraction < 1 and 0 < test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise ValueError("world.dev_fraction and world.test_fraction must be in (0, 1) and sum below 1")
    rng = random.Random(seed)
    entities = make_entities(rng, passages)
    order = list(range(len(entities)))
    rng.shuffle(order)
    pid = {id(entities[j]): str(i) for i, j in enumerate(order)}
    real = [e for e in entities if not e.distractor]
    by_name = {e.name: e for e in real}

    split_of: Dict[str, List[Entity]] = {s: [] for s in SPLITS}
    for e in real:
        u = rng.random()
        split_of["dev" if u < dev_fraction else "test" if u < dev_fraction + test_fraction else "train"].append(e)
    n_dev, n_test = round(questions * dev_fraction), round(questions * test_fraction)
    targets = {"train": questions - n_dev - n_test, "dev": n_dev, "test": n_test}

    os.makedirs(out_dir, exist_ok=True)
    files = {"corpus": os.path.join(out_dir, "corpus.jsonl")}
    with open(files["corpus"], "w", encoding="utf-8") as f:
        for j in order:
            e = entities[j]
            f.write(json.dumps({"id": pid[id(e)], "contents": render_passage(e, rng)}, ensure_ascii=False) + "\n")
    seen: Dict[str, bool] = {}
    counts: Dict[str, Dict[str, int]] = {}
    for split in SPLITS:
        qs = questions_for_split(rng, split_of[split], by_name, targets[split], seen, shares, attributes, chains, hops)
        files[split] = os.path.join(out_dir, f"{split}.jsonl")
        with open(files[split], "w", encoding="utf-8") as f:
            for i, q in enumerate(qs):
                f.write(json.dumps(_row(split, i, q, by_name, pid), ensure_ascii=False) + "\n")
        counts[split] = {t: sum(q.type == t for q in qs) for t in SHARES}
        counts[split]["total"] = len(qs)
    manifest = {
        "seed": seed,
        "passages": len(entities),
        "distractors": len(entities) - len(real),
        "questions": counts,
        "filters": world_filters(list(shares), attributes, chains, hops),
        "size": world_size(passages, questions, dev_fraction, test_fraction),
        "sha256": {k: file_sha256(p) for k, p in files.items()},
    }
    with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    return manifest


def world_filters(
    question_types: Sequence[str],
    single_attributes: Optional[Sequence[str]],
    bridge_chains: Optional[Sequence[str]],
    hops: int = 2,
) -> Dict[str, object]:
    """The question filters a world was built with, as its manifest records them (sorted; empty:
    all), so a run that finds a world already built can tell whether it is the one it asks for.
    `hops` only when it is not 2 (`FILTER_DEFAULTS`): a two-hop world's manifest is the same as
    before the option existed."""
    out: Dict[str, object] = {
        "question_types": sorted(set(question_types)),
        "single_attributes": sorted(set(single_attributes or [])),
        "bridge_chains": sorted(set(bridge_chains or [])),
    }
    if hops != FILTER_DEFAULTS["hops"]:
        out["hops"] = hops
    return out


# a filter a manifest may leave out, and what it then means (worlds built before it existed)
FILTER_DEFAULTS: Dict[str, object] = {"hops": 2}


def world_size(passages: int, questions: int, dev_fraction: float, test_fraction: float) -> Dict[str, float]:
    """The sizes a world was asked for, as its manifest records them (the passages it has are
    about, not exactly, the number asked for)."""
    return {"passages": passages, "questions": questions, "dev_fraction": dev_fraction, "test_fraction": test_fraction}


def check_built_world(
    out_dir: str, filters: Dict[str, object], seed: Optional[int] = None, size: Optional[Dict[str, float]] = None
) -> None:
    """Raise when the world in `out_dir` was built with other question filters than `filters`
    (`world_filters`), from another seed than `seed` or with other sizes than `size`
    (`world_size`; None: any): a resumed run or a new seed in an old run dir would otherwise
    train and evaluate on questions its config does not describe (a recipe that moved to a
    larger world would resume on the smaller one). A manifest written before the filters or the
    sizes were recorded is not checked for them, except its passages: the seed's entity count
    for the asked size is recomputed (what the world's first draws were)."""
    path = os.path.join(out_dir, "manifest.json")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    if seed is not None and manifest.get("seed", seed) != seed:
        raise ValueError(
            f"world.seed: the world in {out_dir} was built from seed {manifest['seed']}, the config asks for "
            f"{seed} (world.seed defaults to the run seed); use a new run_dir (or world.dir), or remove the "
            "world to rebuild it"
        )
    if size is not None:
        built_size = manifest.get("size")
        if built_size is None and "seed" in manifest:  # written before the sizes were recorded
            n = len(make_entities(random.Random(manifest["seed"]), int(size["passages"])))
            if n != manifest.get("passages"):
                _refuse(out_dir, "passages", f"another size ({manifest.get('passages')} passages)", size["passages"])
        for key, built in (built_size or {}).items():
            if built != size.get(key):
                _refuse(out_dir, key, built, size.get(key))
    built = manifest.get("filters")
    if built is None:
        return
    for key in [*filters, *(k for k in FILTER_DEFAULTS if k not in filters)]:
        want, have = filters.get(key, FILTER_DEFAULTS.get(key)), built.get(key, FILTER_DEFAULTS.get(key))
        if have != want:
            _refuse(out_dir, key, f"{have} ([] means all)" if isinstance(have, list) else have, want)


def _refuse(out_dir: str, key: str, built: object, want: object) -> NoReturn:
    """Every mismatch says the same three things: the key, what the world has, what is asked."""
    raise ValueError(
        f"world.{key}: the world in {out_dir} was built with {built}, the config asks for {want}; "
        "use a new run_dir (or world.dir), or remove the world to rebuild it"
    )


def _row(split: str, i: int, q: Question, by_name: Dict[str, Entity], pid: Dict[int, str]) -> dict:
    row = {
        "id": f"{split}_{i}",
        "question": q.question,
        "golden_answers": q.golden_answers,
        "hops": q.hops,
        "supporting_ids": [pid[id(by_name[n])] for n in q.supporting],
        "type": q.type,
        "bridge": q.bridge,
    }
    if q.chain:  # more than two hops (a two-hop row is as it always was: its chain is `bridge`)
        row["chain"] = q.chain
    return row
