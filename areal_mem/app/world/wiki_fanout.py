"""FanOutQA's multi-hop questions as task rows, kept where their evidence pages are in the corpus.

A FanOutQA question is decomposed into sub-questions (some into sub-sub-questions); each leaf
names the Wikipedia page that answers it. The world keeps a top-level question when every
evidence page below it is a corpus passage, and a sub-question (any level) when its own page
is. Answers are strings, numbers, booleans, lists or dicts: `golden_answers` holds one text
(a list joined by ", ", a dict as "key: value" pairs joined by "; ", booleans yes/no) and
`answer_parts` the strings FanOutQA's own accuracy counts (every list item; a dict's keys and
values), so its loose accuracy can be computed from the rows alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from areal_mem.rollout.rewards.metrics import normalize_answer


@dataclass
class FanoutRows:
    questions: List[dict] = field(default_factory=list)
    subs: List[dict] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=dict)


def fanout_rows(entries: List[dict], corpus_ids: Dict[str, str]) -> FanoutRows:
    """Rows of the questions and sub-questions answerable from the corpus (`corpus_ids`: title ->
    passage id), in file order, with the counts the manifest records."""
    out = FanoutRows()
    c = {
        "questions_read": len(entries),
        "questions_kept": 0,
        "questions_missing_pages": 0,
        "sub_questions_read": 0,
        "sub_questions_kept": 0,
        "sub_questions_missing_page": 0,
        "sub_questions_duplicate": 0,
        "empty_answer": 0,
    }
    seen: set = set()
    for entry in entries:
        leaves = list(_leaves(entry))
        c["sub_questions_read"] += sum(1 for _ in _all_subs(entry))
        for sub in leaves:
            title = sub["evidence"]["title"]
            if title not in corpus_ids:
                c["sub_questions_missing_page"] += 1
                continue
            row = _row(sub, [title], corpus_ids, parent=entry["id"])
            if row is None:
                c["empty_answer"] += 1
                continue
            key = normalize_answer(sub["question"])
            if key in seen:
                c["sub_questions_duplicate"] += 1
                continue
            seen.add(key)
            out.subs.append(row)
        titles = sorted({s["evidence"]["title"] for s in leaves})
        if not titles or any(t not in corpus_ids for t in titles):
            c["questions_missing_pages"] += 1
            continue
        row = _row(entry, titles, corpus_ids)
        if row is None:
            c["empty_answer"] += 1
            continue
        row["hops"] = len(leaves)
        out.questions.append(row)
    c["questions_kept"], c["sub_questions_kept"] = len(out.questions), len(out.subs)
    out.counts = c
    return out


def _all_subs(entry: dict):
    for sub in entry["decomposition"]:
        yield sub
        yield from _all_subs(sub)


def _leaves(entry: dict):
    """The sub-questions (any depth) that name an evidence page."""
    for sub in _all_subs(entry):
        if sub.get("evidence") is not None:
            yield sub


def _row(entry: dict, titles: List[str], corpus_ids: Dict[str, str], parent: str = "") -> dict | None:
    text, parts = answer_text(entry["answer"])
    if not text:
        return None
    row: Dict[str, Any] = {
        "id": f"fanoutqa-{entry['id']}",
        "question": " ".join(entry["question"].split()),
        "golden_answers": [text],
        "source": "fanoutqa",
        "answer_parts": parts,
        "evidence_titles": titles,
        "supporting_ids": [corpus_ids[t] for t in titles],
    }
    if parent:
        row["parent"] = f"fanoutqa-{parent}"
    return row


def answer_text(answer: Any) -> Tuple[str, List[str]]:
    """(one answer text, the strings FanOutQA's accuracy looks for); ("", []) for an empty answer."""
    if isinstance(answer, dict):
        pairs = [(_scalar(k), answer_text(v)[0]) for k, v in answer.items()]
        pairs = [(k, v) for k, v in pairs if k and v]
        parts = [p for k, v in answer.items() for p in (_scalar(k), *answer_text(v)[1]) if p]
        return "; ".join(f"{k}: {v}" for k, v in pairs), parts
    if isinstance(answer, list):
        texts = [answer_text(a) for a in answer]
        return ", ".join(t for t, _ in texts if t), [p for _, ps in texts for p in ps]
    text = _scalar(answer)
    return text, [text] if text else []


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value is None:
        return ""
    return " ".join(str(value).split())
