"""One question for a workflow: areal-mem's task format.

On disk a task is one FlashRAG-compatible jsonl line
`{"id", "question", "golden_answers": [...], "metadata": {...}}`; any other
keys of the line (the synthetic world's `hops`, `supporting_ids`, `bridge`,
Search-R1's `data_source`) are kept in `metadata`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List


@dataclass
class Task:
    id: str
    question: str
    golden_answers: List[str]
    metadata: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "metadata": dict(self.metadata),
        }
