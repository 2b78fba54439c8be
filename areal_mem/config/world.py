"""Where the synthetic search world lives and how big it is."""

from dataclasses import dataclass, field
from enum import Enum
from typing import List

from omegaconf import II


class QuestionType(str, Enum):
    single = "single"  # one passage holds the answer
    bridge = "bridge"  # two hops through a linking entity (`world.hops`: more)
    comparison = "comparison"  # two passages, compare one attribute


@dataclass
class WorldConfig:
    dir: str = "${run_dir}/world"  # folder with corpus.jsonl and train/dev/test.jsonl
    build: bool = False  # `areal-mem train`: build the world (and, with no index, its index) first
    seed: int = II("seed")  # defaults to the run seed
    passages: int = 2000  # roughly how many corpus passages to write
    questions: int = 5000  # how many questions over all splits
    dev_fraction: float = 0.1
    test_fraction: float = 0.1
    # which question types to write (mixed by their default shares); a small debug model
    # learns single-hop questions within minutes
    question_types: List[QuestionType] = field(default_factory=lambda: list(QuestionType))
    # single-hop questions ask only for these facts (`kind.attr`, e.g. person.occupation); empty: all
    single_attributes: List[str] = field(default_factory=list)
    # bridge questions follow only these two-hop chains (`kind.link.attr`, e.g.
    # person.birthplace.country: a person's birth city, then its country); empty: all
    bridge_chains: List[str] = field(default_factory=list)
    # hops of every bridge question: 2 is the chains above; k > 2 names only the start entity and
    # follows k - 1 links (work.creator, person.employer, org.founder, ...) whose last two hops
    # are a `bridge_chains` chain ("In which country was the creator of X born?" is 3 hops), so
    # each of the k passages is needed: the horizon at which MemSearcher's flat context is
    # compared with ReAct's growing one (`python -m benchmarks paper --hops`, `... cost`)
    hops: int = 2
