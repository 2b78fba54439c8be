"""Answer searches from recorded tapes instead of the retriever (`rollout.replay_tools`).

With fixed weights and per-request sampling seeds (`rollout.seeded_sampling`), an episode's
tokens depend only on what it is told; a replay tells it exactly what the recording was told,
so the episode comes out token for token the same, with no retriever running. Calls are
answered by (query, top_n); when a query recurs, its recorded answers are served in recorded
order, and the last one again once they are used up (one index answers one query the same way
every time, and tapes of different indexes are refused together). A call never recorded raises
`ReplayMiss` naming the query and the tapes; it reaches the network only with
`rollout.replay_fallback`, which sends it to the live retriever and counts it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .base import SearchBackend, ToolUnavailable, WrappedBackend
from .tape import TapeError, read_tape, tape_files


class ReplayMiss(ToolUnavailable):
    """A search the tapes do not hold, with no live fallback."""


class ReplayBackend(WrappedBackend):
    def __init__(self, paths: Sequence[str], live: Optional[SearchBackend] = None, fallback: bool = False) -> None:
        if fallback and live is None:
            raise ValueError("a replay with fallback needs a live backend to send misses to")
        super().__init__(live)  # closed with the replay; searched only on a miss with `fallback`
        self.fallback = fallback
        self.files = tape_files(paths)
        if not self.files:
            raise TapeError("rollout.replay_tools names no tool recordings")
        self._answers: Dict[Tuple[str, int], List[List[Dict[str, Any]]]] = defaultdict(list)
        self._served: Dict[Tuple[str, int], int] = defaultdict(int)
        first: Optional[Tuple[str, str]] = None  # (checksum, file) of the first record
        for path in self.files:
            for record in read_tape(path):
                if first is None:
                    first = (record.index_checksum, path)
                elif record.index_checksum != first[0]:
                    raise TapeError(
                        f"{path} was recorded against index {record.index_checksum!r}, {first[1]} against "
                        f"{first[0]!r}: replay the tapes of one index together"
                    )
                self._answers[(record.query, record.top_n)].append(record.docs)
        self._checksum = first[0] if first else ""
        self.replayed = 0
        self.live = 0  # misses sent to the fallback

    async def index_checksum(self) -> str:
        """The index the tapes were recorded against (so recording a replay keeps naming it)."""
        return self._checksum

    @property
    def recorded_calls(self) -> int:
        return sum(len(a) for a in self._answers.values())

    async def search(self, query: str, top_n: int) -> List[Dict[str, Any]]:
        answers = self._answers.get((query, top_n))
        if answers:
            i = self._served[(query, top_n)]
            self._served[(query, top_n)] += 1
            self.replayed += 1
            return answers[min(i, len(answers) - 1)]
        if not self.fallback:
            more = f" and {len(self.files) - 1} more" if len(self.files) > 1 else ""
            raise ReplayMiss(
                f"no recorded answer for the search {query!r} (top_n={top_n}) in {self.files[0]}{more}; "
                f"record it (rollout.record_tools) or let misses reach the retriever (rollout.replay_fallback=true)"
            )
        if self.inner is None:  # not reached: search_backend refuses replay_fallback without a retriever
            raise ReplayMiss(f"no recorded answer for the search {query!r} and no retriever to ask")
        self.live += 1
        return await self.inner.search(query, top_n)
