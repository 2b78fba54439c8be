"""Fictional names: syllable-built, so no pretrained model has seen the facts behind them."""

from __future__ import annotations

import random
from typing import Callable, Dict

_ONSETS = [
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "sk",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "vr",
    "z",
    "qu",
    "j",
    "w",
]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ai", "ei", "ou", "y"]
_CODAS = ["", "", "", "", "n", "r", "l", "s", "k", "m"]

ORG_KINDS = [
    "Dynamics",
    "Institute",
    "Company",
    "Foundation",
    "Works",
    "Guild",
    "Laboratories",
    "Society",
    "Trading House",
    "Observatory",
]
WORK_ADJECTIVES = [
    "Silent",
    "Crimson",
    "Hollow",
    "Last",
    "Distant",
    "Broken",
    "Golden",
    "Quiet",
    "Hidden",
    "Burning",
    "Pale",
    "Endless",
    "Northern",
    "Second",
    "Forgotten",
    "Iron",
]
WORK_NOUNS = [
    "Meridian",
    "Harbour",
    "Lantern",
    "Orchard",
    "Cathedral",
    "Tide",
    "Mirror",
    "Garden",
    "Winter",
    "River",
    "Tower",
    "Voyage",
    "Archive",
    "Season",
    "Compass",
    "Bridge",
]
CITY_PREFIXES = ["", "", "", "", "Port ", "New ", "Upper ", "Saint ", "Fort "]
COUNTRY_SUFFIXES = ["ia", "land", "ania", "ova", "istan", "mark", "enne"]
CURRENCY_NAMES = ["crown", "mark", "florin", "dram", "sol", "talent", "ducat", "lira", "shell"]


def _syllable(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def word(rng: random.Random, syllables: int) -> str:
    return "".join(_syllable(rng) for _ in range(syllables)).capitalize()


class NameBook:
    """Hands out names that are unique across the whole world (homonyms are made on purpose elsewhere)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: Dict[str, bool] = {}
        self.surnames = [word(rng, 2) for _ in range(400)]

    def _unique(self, make: Callable[[], str]) -> str:
        for _ in range(1000):
            name = make()
            if name not in self.used:
                self.used[name] = True
                return name
        raise RuntimeError("name space exhausted; add syllables")

    def person(self) -> str:
        return self._unique(lambda: f"{word(self.rng, 2)} {self.rng.choice(self.surnames)}")

    def city(self) -> str:
        return self._unique(lambda: self.rng.choice(CITY_PREFIXES) + word(self.rng, 2))

    def country(self) -> str:
        return self._unique(lambda: word(self.rng, 2) + self.rng.choice(COUNTRY_SUFFIXES))

    def org(self) -> str:
        return self._unique(lambda: f"{word(self.rng, 2)} {self.rng.choice(ORG_KINDS)}")

    def work(self) -> str:
        def make() -> str:
            noun = self.rng.choice(WORK_NOUNS + [word(self.rng, 2)])
            return f"The {self.rng.choice(WORK_ADJECTIVES)} {noun}"

        return self._unique(make)

    def currency(self, country: str) -> str:
        return f"{country[:4].rstrip('aeiou')}ian {self.rng.choice(CURRENCY_NAMES)}"
