"""A bounded LRU cache of search answers, in front of the micro-batcher.

Rollouts ask the same queries again and again: the G episodes of one group read the same
question and often open with the same search, and every epoch asks the training questions
again. A hit answers from memory without an encoder pass or an index call, so the service has
less to do exactly when it is loaded most.

The key is (query exactly as sent, top_n). No normalisation: lower-casing or collapsing white
space is invisible to BM25 and to uncased BERT encoders but changes what a byte-level BPE
encoder sees, so it could change an answer, and the cache must never do that (the search tool
already strips the query). Concurrent misses of one key share one search (single flight), so a
group's simultaneous identical first searches cost one query; they count as hits.

The service loads its index once and never swaps it, and the cache lives and dies with the
service's app, so a changed index (a restart) always starts with an empty cache.

It is bounded twice: by entries (`retriever.cache_size`) and by bytes (`retriever.cache_mb`),
since 1,000 entries of long queries with long passages can hold a gigabyte. An entry's bytes are
those of its query and of its documents' strings as UTF-8 (plus a fixed charge per hit for the
objects around them): what a client controls and what grows with the corpus.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Awaitable, Callable, Dict, List, Tuple

HIT_OVERHEAD = 200  # bytes charged per hit for the dict, the tuple and the float around its strings

Key = Tuple[str, int]
Search = Callable[[str, int], Awaitable[list]]  # (query, top_n) -> hits


def entry_bytes(query: str, hits: list) -> int:
    """What one cached answer costs: its query and its documents' strings, plus a charge per hit."""
    size = len(query.encode("utf-8", "surrogatepass"))
    for doc, _score in hits:
        size += HIT_OVERHEAD + sum(len(str(v).encode("utf-8", "surrogatepass")) for v in doc.values())
    return size


class QueryCache:
    def __init__(self, capacity: int, max_bytes: int = 0):
        """`capacity` entries and, with `max_bytes` > 0, at most that many bytes (`entry_bytes`);
        an answer larger than `max_bytes` alone is returned but not kept."""
        if capacity < 1:
            raise ValueError(f"retriever.cache_size must be >= 1 to cache (0 turns the cache off), got {capacity}")
        self.capacity, self.max_bytes = capacity, max_bytes
        self.bytes = 0
        self._sizes: Dict[Key, int] = {}
        self._entries: OrderedDict[Key, list] = OrderedDict()
        self._pending: Dict[Key, asyncio.Future] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, query: str, top_n: int, search: Search) -> list:
        """The hits of (query, top_n): from the cache, from a search in flight, or from `search`."""
        key = (query, top_n)
        if key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            return self._entries[key]
        pending = self._pending.get(key)
        if pending is not None:
            try:
                hits = await asyncio.shield(pending)
                self.hits += 1
                return hits
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request was cancelled, not the search it waited for
            # the request that ran the search went away: search again
        return await self._search(key, search)

    async def _search(self, key: Key, search: Search) -> list:
        self.misses += 1
        fut = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            hits = await search(*key)
        except Exception as e:
            fut.set_exception(e)
            fut.exception()  # marked retrieved: no warning when no other request waited on it
            raise
        except BaseException:
            fut.cancel()
            raise
        finally:
            del self._pending[key]
        fut.set_result(hits)
        self._keep(key, hits)
        return hits

    def _keep(self, key: Key, hits: list) -> None:
        size = entry_bytes(key[0], hits)
        if self.max_bytes and size > self.max_bytes:
            return
        self._entries[key], self._sizes[key] = hits, size
        self.bytes += size
        while len(self._entries) > self.capacity or (self.max_bytes and self.bytes > self.max_bytes):
            old, _ = self._entries.popitem(last=False)
            self.bytes -= self._sizes.pop(old)

    async def get_many(self, queries: List[str], top_n: int, search: Search) -> List[list]:
        return list(await asyncio.gather(*(self.get(q, top_n, search) for q in queries)))

    def stats(self) -> dict:
        asked = self.hits + self.misses
        return {
            "size": len(self._entries),
            "capacity": self.capacity,
            "bytes": self.bytes,
            "max_bytes": self.max_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hits / asked, 4) if asked else 0.0,
        }
