"""Questions over the world: 1-hop facts, 2-hop bridges and comparisons, in varied phrasings."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .entities import Entity


@dataclass
class Question:
    question: str
    golden_answers: List[str]
    type: str  # single | bridge | comparison
    supporting: List[str]  # names of the real entities whose passages hold the facts
    bridge: str = ""  # the entity linking the two passages of a bridge question
    hops: int = field(init=False)

    def __post_init__(self) -> None:
        self.hops = len(self.supporting)


SINGLE: Dict[str, Dict[str, List[str]]] = {
    "person": {
        "born": ["In what year was {s} born?", "When was {s} born?", "What is the birth year of {s}?"],
        "birthplace": ["Where was {s} born?", "In which city was {s} born?", "What is the birthplace of {s}?"],
        "occupation": ["What was the profession of {s}?", "What did {s} do for a living?"],
        "employer": ["Which organisation did {s} work for?", "Who employed {s}?"],
    },
    "city": {
        "country": ["In which country is {s} located?", "{s} is a city in which country?"],
        "founded": ["In what year was {s} founded?", "When was the city of {s} founded?"],
    },
    "country": {
        "capital": ["What is the capital of {s}?", "Which city is the capital of {s}?"],
        "currency": ["What currency is used in {s}?", "What is the currency of {s}?"],
    },
    "org": {
        "founder": ["Who founded {s}?", "Who was the founder of {s}?"],
        "headquarters": ["Where is {s} headquartered?", "In which city are the headquarters of {s}?"],
        "founded": ["In what year was {s} founded?"],
    },
    "work": {
        "creator": ["Who created {s}?", "Who is the creator of {s}?"],
        "year": ["In what year did {s} appear?", "When was {s} first presented?"],
    },
}

# (subject kind, link attribute, attribute of the linked entity) -> phrasings
BRIDGE: Dict[Tuple[str, str, str], List[str]] = {
    ("work", "creator", "birthplace"): [
        "In which city was the creator of {s} born?",
        "Where was the person who created {s} born?",
    ],
    ("work", "creator", "born"): ["In what year was the creator of {s} born?"],
    ("org", "founder", "birthplace"): ["Where was the founder of {s} born?"],
    ("org", "headquarters", "country"): [
        "In which country is {s} headquartered?",
        "The headquarters of {s} are in which country?",
    ],
    ("person", "birthplace", "country"): ["In which country was {s} born?", "{s} was born in a city of which country?"],
    ("person", "employer", "headquarters"): ["In which city is the employer of {s} headquartered?"],
    ("person", "employer", "founder"): ["Who founded the organisation that {s} worked for?"],
    ("country", "capital", "founded"): ["In what year was the capital of {s} founded?"],
}

# kind -> (attribute, phrasings); the answer is the entity with the smaller value ("earlier")
# or, for population, the larger one.
COMPARISON: Dict[str, List[Tuple[str, List[str]]]] = {
    "person": [("born", ["Who was born first, {a} or {b}?", "Which of {a} and {b} was born earlier?"])],
    "city": [
        ("founded", ["Which city was founded earlier, {a} or {b}?"]),
        ("population", ["Which city has more inhabitants, {a} or {b}?"]),
    ],
    "work": [("year", ["Which appeared first, {a} or {b}?"])],
    "org": [("founded", ["Which was founded first, {a} or {b}?"])],
}

SHARES = {"single": 0.5, "bridge": 0.3, "comparison": 0.2}


def single_questions(
    rng: random.Random, pool: List[Entity], attributes: Optional[Sequence[str]] = None
) -> List[Question]:
    """One question per (entity, attribute); `attributes` (`kind.attr`, default all) restricts them."""
    out = []
    for e in pool:
        for attr, phrasings in SINGLE[e.kind].items():
            if attr in e.attrs and (attributes is None or f"{e.kind}.{attr}" in attributes):
                out.append(Question(rng.choice(phrasings).format(s=e.name), [str(e.attrs[attr])], "single", [e.name]))
    return out


def bridge_questions(
    rng: random.Random, pool: List[Entity], by_name: Dict[str, Entity], chains: Optional[Sequence[str]] = None
) -> List[Question]:
    """One question per (entity, chain); `chains` (`kind.link.attr`, default all) restricts them."""
    out = []
    for e in pool:
        for (kind, link, attr), phrasings in BRIDGE.items():
            if e.kind != kind or link not in e.attrs or (chains is not None and f"{kind}.{link}.{attr}" not in chains):
                continue
            mid = by_name[str(e.attrs[link])]
            out.append(
                Question(
                    rng.choice(phrasings).format(s=e.name),
                    [str(mid.attrs[attr])],
                    "bridge",
                    [e.name, mid.name],
                    bridge=mid.name,
                )
            )
    return out


def comparison_questions(rng: random.Random, pool: List[Entity], count: int) -> List[Question]:
    by_kind: Dict[str, List[Entity]] = {}
    for e in pool:
        if e.kind in COMPARISON:
            by_kind.setdefault(e.kind, []).append(e)
    kinds = [k for k in sorted(by_kind) if len(by_kind[k]) >= 2]
    out: List[Question] = []
    for _ in range(count * 3):
        if len(out) >= count or not kinds:
            break
        kind = rng.choice(kinds)
        a, b = rng.sample(by_kind[kind], 2)
        attr, phrasings = rng.choice(COMPARISON[kind])
        q = _compare(rng, a, b, attr, phrasings)
        if q:
            out.append(q)
    return out


def _compare(rng: random.Random, a: Entity, b: Entity, attr: str, phrasings: List[str]) -> Optional[Question]:
    va, vb = int(a.attrs[attr]), int(b.attrs[attr])
    if va == vb:
        return None
    larger_wins = attr == "population"
    winner = a if (va > vb) == larger_wins else b
    text = rng.choice(phrasings).format(a=a.name, b=b.name)
    return Question(text, [winner.name], "comparison", [a.name, b.name])


def check_attributes(attributes: Optional[Sequence[str]]) -> Optional[List[str]]:
    """`kind.attr` names of single-hop questions; None or empty: all of them."""
    known = [f"{k}.{a}" for k, attrs in SINGLE.items() for a in attrs]
    return _check_names("world.single_attributes", attributes, known)


def check_chains(chains: Optional[Sequence[str]]) -> Optional[List[str]]:
    """`kind.link.attr` names of bridge questions (BRIDGE's keys); None or empty: all of them."""
    return _check_names("world.bridge_chains", chains, [".".join(k) for k in BRIDGE])


def _check_names(key: str, names: Optional[Sequence[str]], known: List[str]) -> Optional[List[str]]:
    if not names:
        return None
    unknown = [a for a in names if a not in known]
    if unknown:
        raise ValueError(f"{key}: unknown {unknown}; choose from {known}")
    return list(names)


def type_shares(types: Optional[Sequence[str]] = None) -> Dict[str, float]:
    """SHARES restricted to the type names `types` (all when None) and renormalised."""
    chosen = list(SHARES) if types is None else list(types)
    unknown = sorted(set(chosen) - set(SHARES))
    if unknown or not chosen:
        raise ValueError(f"world.question_types must be a non-empty subset of {list(SHARES)}, got {chosen}")
    if set(chosen) == set(SHARES):
        return dict(SHARES)
    total = sum(SHARES[t] for t in SHARES if t in chosen)
    return {t: SHARES[t] / total for t in SHARES if t in chosen}


def questions_for_split(
    rng: random.Random,
    pool: List[Entity],
    by_name: Dict[str, Entity],
    count: int,
    seen: Dict[str, bool],
    shares: Optional[Dict[str, float]] = None,
    attributes: Optional[Sequence[str]] = None,
    chains: Optional[Sequence[str]] = None,
) -> List[Question]:
    """`count` questions about `pool`'s entities, mixed by `shares` (default SHARES), none already
    in `seen`; `attributes` restricts the single-hop ones (see `single_questions`), `chains` the
    bridges (see `bridge_questions`)."""
    shares = shares or SHARES
    candidates = {
        "single": single_questions(rng, pool, attributes),
        "bridge": bridge_questions(rng, pool, by_name, chains),
        "comparison": comparison_questions(rng, pool, int(count * SHARES["comparison"]) + 10),
    }
    candidates = {kind: items for kind, items in candidates.items() if kind in shares}
    for items in candidates.values():
        rng.shuffle(items)
    chosen: List[Question] = []

    def take(kind: str, n: int) -> None:
        items = candidates[kind]
        while items and n > 0 and len(chosen) < count:
            q = items.pop()
            if q.question not in seen:
                seen[q.question] = True
                chosen.append(q)
                n -= 1

    for kind, share in shares.items():
        take(kind, round(count * share))
    for kind in shares:  # top up from whatever is left when one type runs short
        take(kind, count - len(chosen))
    rng.shuffle(chosen)
    return chosen
