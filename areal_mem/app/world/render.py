"""Entities rendered as wiki-18 passages, with several phrasings of every fact."""

from __future__ import annotations

import random
from typing import Callable, Dict, List

from .entities import WORK_KINDS, Entity

Facts = Dict[str, object]
Template = Callable[[Facts], str]

FILLERS = {
    "person": [
        "{P} is remembered for {poss} patient and careful work.",
        "Little is known about {poss} early education.",
        "{P} corresponded with many contemporaries.",
    ],
    "city": [
        "The city is known for its markets and narrow streets.",
        "A stone bridge crosses the river in the old quarter.",
    ],
    "country": ["Its history is marked by long periods of trade and neutrality."],
    "org": ["It remained independent for most of its history."],
    "work": ["Critics were divided when it first appeared."],
}

_PERSON: List[Template] = [
    lambda f: "{name} (born {born}) is {a_occupation} from {birthplace}.".format(**f),
    lambda f: "{name} was {a_occupation} born in {birthplace} in {born}.".format(**f),
    lambda f: "Born in {born} in the city of {birthplace}, {name} became a well-known {occupation}.".format(**f),
    lambda f: "{name} is {a_occupation}. {P} was born in {born} in {birthplace}.".format(**f),
]
_EMPLOYER: List[Template] = [
    lambda f: "{P} worked for {employer} for many years.".format(**f),
    lambda f: "{P} was employed by {employer}.".format(**f),
    lambda f: "For most of {poss} career, {name} worked at {employer}.".format(**f),
]
_CITY: List[Template] = [
    lambda f: "{name} is a city in {country}, in {region}.".format(**f),
    lambda f: "The city of {name} lies in {region} and belongs to {country}.".format(**f),
    lambda f: "{name} is a city located in {country}.".format(**f),
]
_CITY_FOUNDED: List[Template] = [
    lambda f: "It was founded in {founded}.".format(**f),
    lambda f: "{name} was founded in the year {founded}.".format(**f),
]
_CITY_POPULATION: List[Template] = [
    lambda f: "It has a population of about {population}.".format(**f),
    lambda f: "About {population} people live in {name}.".format(**f),
]
_COUNTRY: List[Template] = [
    lambda f: "{name} is a country in {region}. Its capital is {capital}.".format(**f),
    lambda f: "{name} is a state in {region} whose capital city is {capital}.".format(**f),
]
_COUNTRY_MORE: List[Template] = [
    lambda f: "The currency of {name} is the {currency}. It became a state in {founded}.".format(**f),
    lambda f: "It was established in {founded} and pays in the {currency}.".format(**f),
]
_ORG: List[Template] = [
    lambda f: "{name} is {a_industry} organisation founded in {founded} by {founder}.".format(**f),
    lambda f: "{founder} founded {name}, {a_industry} firm, in {founded}.".format(**f),
]
_ORG_HQ: List[Template] = [
    lambda f: "Its headquarters are in {headquarters}.".format(**f),
    lambda f: "{name} is headquartered in {headquarters}.".format(**f),
]
_WORK: List[Template] = [
    lambda f: "{name} is a {year} {kind} {verb} by {creator}.".format(**f),
    lambda f: "{creator} {verb} the {kind} {name} in {year}.".format(**f),
    lambda f: "{name} is a {kind} by {creator}, first presented in {year}.".format(**f),
]

_SENTENCES = {
    "person": [_PERSON, _EMPLOYER],
    "city": [_CITY, _CITY_FOUNDED, _CITY_POPULATION],
    "country": [_COUNTRY, _COUNTRY_MORE],
    "org": [_ORG, _ORG_HQ],
    "work": [_WORK],
}


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
        if group is _EMPLOYER and "employer" not in facts:
            continue
        sentences.append(rng.choice(group)(facts))
    if rng.random() < 0.5:
        sentences.insert(rng.randint(1, len(sentences)), rng.choice(FILLERS[entity.kind]).format(**facts))
    return f'"{entity.title}"\n' + " ".join(sentences)
