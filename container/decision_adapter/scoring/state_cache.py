"""A bounded LRU cache of prefilled state prefixes, shared by every wire format.

Keyed by the exact token sequence of the prefix (and the model's identity): a later request
whose prompt starts with the same state restores the saved sequence and decodes only its
question. Batched decisions score on threads of their own, so each call holds a lock. Entries
are inserted only once complete, so a failed request leaves none.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class CacheStats:
    budget_bytes: int
    size_bytes: int = 0
    entries: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    rejected_too_large: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class StateCache:
    def __init__(self, budget_bytes: int, model_id: str) -> None:
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._model_id = model_id
        self._lock = threading.Lock()
        self.stats = CacheStats(budget_bytes=budget_bytes)

    @property
    def enabled(self) -> bool:
        return self.stats.budget_bytes > 0

    def key(self, prefix_tokens: Sequence[int]) -> str:
        digest = hashlib.sha256(self._model_id.encode())
        digest.update(array("i", prefix_tokens).tobytes())
        return f"{len(prefix_tokens)}:{digest.hexdigest()}"

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._get(key)

    def _get(self, key: str) -> bytes | None:
        state = self._entries.get(key)
        if state is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return state

    def put(self, key: str, state: bytes) -> None:
        with self._lock:
            self._put(key, state)

    def _put(self, key: str, state: bytes) -> None:
        if key in self._entries:
            return
        if len(state) > self.stats.budget_bytes:
            self.stats.rejected_too_large += 1
            return
        while self.stats.size_bytes + len(state) > self.stats.budget_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.stats.size_bytes -= len(evicted)
            self.stats.evictions += 1
        self._entries[key] = state
        self.stats.size_bytes += len(state)
        self.stats.entries = len(self._entries)
