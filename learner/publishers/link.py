"""Rank 0's line to the generators: their admin client, driven from one asyncio loop on a thread.

Only rank 0 talks to the generators, so only rank 0 has a link; the other ranks (and a learner
without generators) hold None, which is how every part of a publisher tells the two apart."""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Coroutine, Optional

from areal_mem.generation import GeneratorError

from ..async_bridge import LoopThread
from ..generator_admin import GeneratorAdmin

log = logging.getLogger(__name__)


class GeneratorLink:
    def __init__(self, client: GeneratorAdmin):
        self.client = client
        self.io = LoopThread()  # the synchronous learner waits on a call, or overlaps it with a collective

    @classmethod
    def of(cls, engine, client: Optional[GeneratorAdmin]) -> Optional[GeneratorLink]:
        """The link of this rank: rank 0's when there are generators, else None."""
        return cls(client) if engine.rank == 0 and client is not None else None

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        """Start `coro` now (a call the generators answer only once a collective runs)."""
        return self.io.submit(coro)

    def run(self, coro: Coroutine[Any, Any, Any], timeout: Optional[float] = None) -> Any:
        return self.io.run(coro, timeout)

    def attempt(self, coro: Coroutine[Any, Any, Any], what: str) -> bool:
        """Run `coro`; False (logged) where a generator failed it: the publisher heals that or fails."""
        try:
            self.io.run(coro)
            return True
        except GeneratorError as e:
            log.warning("weight publisher: %s failed: %s", what, e)
            return False

    def close(self) -> None:
        self.io.run(self.client.close())
        self.io.close()


def rank0(link: Optional[GeneratorLink], who: str) -> GeneratorLink:
    """`link` where only rank 0 may be (it alone holds the line to the generators)."""
    if link is None:
        raise RuntimeError(f"{who}: called on a rank without the generator link (only rank 0 talks to generators)")
    return link
