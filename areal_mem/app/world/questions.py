"""Questions over the world: 1-hop facts, bridges of 2 or more hops and comparisons, in varied phrasings.

A bridge of k hops names only its start entity and follows k - 1 of the world's links (a work's
creator, a person's employer, an organisation's founder, ...) before it asks an attribute of the
last entity, so each of its k supporting passages is needed: every passage names the next
entity of the chain and nothing beyond it. Two-hop bridges are the `BRIDGE` table; longer ones
are built compositionally, a noun phrase per link in front of a `BRIDGE` chain ("In which
country was the creator of X born?": `work.creator` then `person.birthplace.country`).
"""

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
    bridge: str = ""  # the entity linking the two passages of a bridge question (the first hop's find)
    # a bridge of more than two hops: the entities its hops after the first find, in order
    # (`bridge` first, the last hop's entity last); empty for two hops, where it is `[bridge]`
    chain: List[str] = field(default_factory=list)
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

# The links between real entities: (kind, attribute) -> the kind of entity the attribute names.
LINKS: Dict[Tuple[str, str], str] = {
    ("work", "creator"): "person",
    ("org", "founder"): "person",
    ("org", "headquarters"): "city",
    ("person", "birthplace"): "city",
    ("person", "employer"): "org",
    ("city", "country"): "country",
    ("country", "capital"): "city",
}

# (kind, link) -> noun phrases for the entity the link names, `{s}` the phrase of the one before:
# a chain of more than two hops puts them in front of a BRIDGE phrasing, innermost first
NOUNS: Dict[Tuple[str, str], List[str]] = {
    ("work", "creator"): ["the creator of {s}", "the person who created {s}"],
    ("org", "founder"): ["the founder of {s}", "the person who founded {s}"],
    ("org", "headquarters"): ["the city where {s} is headquartered"],
    ("person", "birthplace"): ["the birthplace of {s}", "the city where {s} was born"],
    ("person", "employer"): ["the organisation that employed {s}", "the employer of {s}"],
    ("city", "country"): ["the country where {s} lies"],
    ("country", "capital"): ["the capital of {s}"],
}

# `world.hops`: 2 is the BRIDGE table as it always was; longer chains alternate people and
# organisations (employer, founder) before their last two hops, and nothing new is asked of an
# agent beyond 8 hops but more turns (the recipes' turn limits are 4; `python -m benchmarks
# paper --hops` raises them)
MIN_HOPS, MAX_HOPS = 2, 8

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


@dataclass(frozen=True)
class ChainSpec:
    """A bridge chain of `hops` = len(links) + 1 passages: start at an entity of `kind`, follow
    `links` in order, ask `attr` of the entity the last link names. `name` is how configs and
    manifests write it (`work.creator.birthplace.country`); the last link and `attr` are a
    BRIDGE key, the two-hop question the chain ends in."""

    kind: str
    links: Tuple[str, ...]
    attr: str

    @property
    def name(self) -> str:
        return ".".join((self.kind, *self.links, self.attr))

    @property
    def hops(self) -> int:
        return len(self.links) + 1

    @property
    def final(self) -> Tuple[str, str, str]:
        """The BRIDGE key of the last two hops."""
        return (self.kinds[-2], self.links[-1], self.attr)

    @property
    def kinds(self) -> Tuple[str, ...]:
        """The kind of every entity of the chain, the start's first."""
        out = [self.kind]
        for link in self.links:
            out.append(LINKS[(out[-1], link)])
        return tuple(out)


def chain_specs(hops: int, chains: Optional[Sequence[str]] = None) -> List[ChainSpec]:
    """Every chain of `hops` hops whose last two hops are a BRIDGE chain (only those named in
    `chains`, `kind.link.attr`, when given), sorted by name: the links before them are any path
    through LINKS that ends at the kind the BRIDGE chain starts from (`build_world` checks
    `hops` against MIN_HOPS and MAX_HOPS)."""
    specs = [
        ChainSpec(k, (link,), attr) for (k, link, attr) in BRIDGE if chains is None or f"{k}.{link}.{attr}" in chains
    ]
    by_name = {s.name: s for s in specs}
    for _ in range(hops - 2):  # prepend one link at a time
        longer = []
        for spec in by_name.values():
            for (kind, link), target in LINKS.items():
                if target == spec.kind:
                    longer.append(ChainSpec(kind, (link, *spec.links), spec.attr))
        by_name = {s.name: s for s in longer}
    return sorted(by_name.values(), key=lambda s: s.name)


def follow(spec: ChainSpec, start: Entity, by_name: Dict[str, Entity]) -> Optional[List[Entity]]:
    """The entities `spec` visits from `start`, or None where a link is missing (a person with no
    employer) or the chain comes back to an entity it has visited (a person who founded their own
    employer): every hop must find a new passage."""
    path = [start]
    for link in spec.links:
        value = path[-1].attrs.get(link)
        nxt = by_name.get(str(value)) if value is not None else None
        if nxt is None or any(nxt is e for e in path):
            return None
        path.append(nxt)
    return path if spec.attr in path[-1].attrs else None


def multi_hop_questions(
    rng: random.Random,
    pool: List[Entity],
    by_name: Dict[str, Entity],
    hops: int,
    chains: Optional[Sequence[str]] = None,
) -> List[Question]:
    """One bridge question of `hops` hops per (start entity of `pool`, chain of `chain_specs`)
    that `follow` can walk; the question names only the start entity. An answer that names an
    entity already on the chain is skipped (the last hop would find nothing new)."""
    specs = chain_specs(hops, chains)
    out = []
    for e in pool:
        for spec in specs:
            if spec.kind != e.kind:
                continue
            path = follow(spec, e, by_name)
            if path is None:
                continue
            answer = str(path[-1].attrs[spec.attr])
            if any(answer == p.name for p in path):
                continue
            subject = e.name
            for kind, link in zip(spec.kinds, spec.links[:-1]):
                subject = rng.choice(NOUNS[(kind, link)]).format(s=subject)
            text = rng.choice(BRIDGE[spec.final]).format(s=subject)
            names = [p.name for p in path]
            out.append(
                Question(text[0].upper() + text[1:], [answer], "bridge", names, bridge=names[1], chain=names[1:])
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
    hops: int = 2,
) -> List[Question]:
    """`count` questions about `pool`'s entities, mixed by `shares` (default SHARES), none already
    in `seen`; `attributes` restricts the single-hop ones (see `single_questions`), `chains` the
    bridges (see `bridge_questions`), and their last two hops when `hops` (the bridges' hop
    count) is more than 2 (see `multi_hop_questions`)."""
    shares = shares or SHARES
    candidates = {
        "single": single_questions(rng, pool, attributes),
        "bridge": (
            bridge_questions(rng, pool, by_name, chains)
            if hops == 2
            else multi_hop_questions(rng, pool, by_name, hops, chains)
        ),
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
