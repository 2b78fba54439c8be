"""Answer metrics with SQuAD normalisation: exact match, token F1, substring accuracy.

Every metric takes the best value over the golden answers, as FlashRAG and
MemSearcher do. yes/no/noanswer only count as an exact match (F1 0 otherwise),
so a partial overlap cannot reward a wrong polarity.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, Sequence

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles a/an/the, collapse white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(golden: Iterable[str] | str) -> Sequence[str]:
    return [golden] if isinstance(golden, str) else [str(g) for g in golden]


def exact_match(prediction: str, golden: Iterable[str] | str) -> float:
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_list(golden)))


def substring_match(prediction: str, golden: Iterable[str] | str) -> float:
    """Accuracy as in Search-R1/FlashRAG: a normalised golden answer occurs in the prediction."""
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(g) in pred for g in _as_list(golden)))


def _f1_one(pred: str, gold: str) -> float:
    if pred in _SPECIAL or gold in _SPECIAL:
        return float(pred == gold)
    pred_tokens, gold_tokens = pred.split(), gold.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golden: Iterable[str] | str) -> float:
    pred = normalize_answer(prediction)
    return max((_f1_one(pred, normalize_answer(g)) for g in _as_list(golden)), default=0.0)
