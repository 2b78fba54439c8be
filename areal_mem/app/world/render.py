"""Entities rendered as wiki-18 passages, with several phrasings of every fact."""

from __future__ import annotations

import json
import random
from importlib import resources
from typing import Dict, List

from .entities import WORK_KINDS, Entity

Facts = Dict[str, object]

# The phrasings are data: areal_mem/app/world/phrasings.json (sentence groups per kind, fillers).
_PHRASINGS = json.loads(resources.files("areal_mem.app.world").joinpath("phrasings.json").read_text(encoding="utf-8"))
FILLERS: Dict[str, List[str]] = _PHRASINGS["fillers"]
_SENTENCES: Dict[str, List[List[str]]] = _PHRASINGS["sentences"]
_OPTIONAL = tuple(_PHRASINGS["optional_facts"])


def _applies(group: List[str], facts: Facts) -> bool:
    """False for a group that names an optional fact the entity lacks (a person with no employer)."""
    return not any(key not in facts and any("{" + key + "}" in t for t in group) for key in _OPTIONAL)


def facts_of(entity: Entity) -> Facts:
    facts: Facts = {"name": entity.name, **entity.attrs}
    if entity.kind == "person":
        facts["P"] = str(entity.attrs["pronoun"]).capitalize()
        facts["poss"] = "his" if entity.attrs["pronoun"] == "he" else "her"
    for key in ("occupation", "industry"):
        if key in facts:
            word = str(facts[key])
            facts[f"a_{key}"] = ("an " if word[0] in "aeiou" else "a ") + word
    if entity.kind == "work":
        facts["verb"] = WORK_KINDS[str(entity.attrs["kind"])]
    return facts


def render_passage(entity: Entity, rng: random.Random) -> str:
    """`"Title"\\ntext`, the wiki-18 `contents` shape."""
    facts = facts_of(entity)
    sentences = []
    for group in _SENTENCES[entity.kind]:
        if _applies(group, facts):
            sentences.append(rng.choice(group).format(**facts))
    if rng.random() < 0.5:
        sentences.insert(rng.randint(1, len(sentences)), rng.choice(FILLERS[entity.kind]).format(**facts))
    return f'"{entity.title}"\n' + " ".join(sentences)
