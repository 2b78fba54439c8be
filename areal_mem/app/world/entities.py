"""The knowledge graph of the synthetic world: entities, their attributes and relations."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, List, Union

from .names import NameBook

OCCUPATIONS = [
    "painter",
    "engineer",
    "poet",
    "cartographer",
    "physician",
    "composer",
    "architect",
    "astronomer",
    "merchant",
    "diplomat",
    "sculptor",
    "historian",
    "botanist",
    "novelist",
]
INDUSTRIES = [
    "shipbuilding",
    "textiles",
    "publishing",
    "mining",
    "optics",
    "banking",
    "clockmaking",
    "printing",
    "glassworks",
    "railways",
]
REGIONS = [
    "the Northern Reach",
    "the Amber Coast",
    "the Inner Plateau",
    "the Southern Isles",
    "the Western Marches",
    "the Eastern Steppe",
]
WORK_KINDS = {
    "novel": "wrote",
    "film": "directed",
    "symphony": "composed",
    "painting": "painted",
    "album": "recorded",
    "play": "wrote",
}

Value = Union[str, int]

# Share of the passage budget per kind; the rest are distractor homonyms.
SHARES = {"country": 0.02, "city": 0.15, "org": 0.15, "work": 0.2, "person": 0.4}
DISTRACTOR_SHARE = 0.08


@dataclass
class Entity:
    kind: str  # person | city | country | org | work
    name: str
    attrs: Dict[str, Value] = field(default_factory=dict)
    title: str = ""  # passage title; differs from name only for distractor homonyms
    distractor: bool = False

    def __post_init__(self) -> None:
        self.title = self.title or self.name


def make_entities(rng: random.Random, passages: int) -> List[Entity]:
    """About `passages` entities (one passage each) with consistent relations between them."""
    names = NameBook(rng)
    n = {k: max(4, round(passages * s)) for k, s in SHARES.items()}
    countries = [Entity("country", names.country()) for _ in range(n["country"])]
    cities = [Entity("city", names.city()) for _ in range(n["city"])]
    for i, city in enumerate(cities):
        country = countries[i % len(countries)] if i < len(countries) else rng.choice(countries)
        city.attrs = {
            "country": country.name,
            "founded": rng.randint(600, 1850),
            "population": rng.randint(5, 2000) * 1000,
            "region": rng.choice(REGIONS),
        }
    for country in countries:
        own = [c for c in cities if c.attrs["country"] == country.name]
        country.attrs = {
            "capital": own[0].name,
            "currency": names.currency(country.name),
            "region": own[0].attrs["region"],
            "founded": rng.randint(900, 1900),
        }
    people = [Entity("person", names.person()) for _ in range(n["person"])]
    orgs = [Entity("org", names.org()) for _ in range(n["org"])]
    for person in people:
        person.attrs = {
            "born": rng.randint(1700, 1990),
            "birthplace": rng.choice(cities).name,
            "occupation": rng.choice(OCCUPATIONS),
            "pronoun": rng.choice(["he", "she"]),
        }
    for org in orgs:
        founder = rng.choice(people)
        org.attrs = {
            "founder": founder.name,
            "headquarters": rng.choice(cities).name,
            "founded": int(founder.attrs["born"]) + rng.randint(20, 60),
            "industry": rng.choice(INDUSTRIES),
        }
    for person in people:
        if rng.random() < 0.6:
            person.attrs["employer"] = rng.choice(orgs).name
    works = [Entity("work", names.work()) for _ in range(n["work"])]
    for work in works:
        creator = rng.choice(people)
        kind = rng.choice(sorted(WORK_KINDS))
        work.attrs = {"creator": creator.name, "kind": kind, "year": int(creator.attrs["born"]) + rng.randint(18, 70)}
    real = countries + cities + people + orgs + works
    return real + _distractors(rng, real, round(passages * DISTRACTOR_SHARE))


def _distractors(rng: random.Random, real: List[Entity], count: int) -> List[Entity]:
    """Homonyms of real entities with other facts, titled `Name (descriptor)`: retrieval returns
    them beside the right passage, so the agent has to read, not just match the name."""
    out = []
    people = [e for e in real if e.kind == "person"]
    cities = [e for e in real if e.kind == "city"]
    for target in rng.sample([e for e in real if e.kind in ("person", "city", "work")], min(count, len(real))):
        if target.kind == "person":
            occ = rng.choice([o for o in OCCUPATIONS if o != target.attrs["occupation"]])
            attrs: Dict[str, Value] = {
                "born": rng.randint(1700, 1990),
                "birthplace": rng.choice(cities).name,
                "occupation": occ,
                "pronoun": rng.choice(["he", "she"]),
            }
            out.append(Entity("person", target.name, attrs, f"{target.name} ({occ})", True))
        elif target.kind == "city":
            creator = rng.choice(people)
            attrs = {"creator": creator.name, "kind": "novel", "year": int(creator.attrs["born"]) + rng.randint(18, 70)}
            out.append(Entity("work", target.name, attrs, f"{target.name} (novel)", True))
        else:
            creator = rng.choice(people)
            kind = rng.choice([k for k in sorted(WORK_KINDS) if k != target.attrs["kind"]])
            attrs = {"creator": creator.name, "kind": kind, "year": int(creator.attrs["born"]) + rng.randint(18, 70)}
            out.append(Entity("work", target.name, attrs, f"{target.name} ({kind})", True))
    return out
