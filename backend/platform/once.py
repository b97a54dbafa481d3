"""Asked twice, done once: an action repeated with the same key within a short window is answered with the first
one's answer (a double click, a retried request), and one asked while the same is still under way is answered at once
by ``busy`` (it never waits: a waiting request holds a server slot that another user's request needs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    """One key's first answer (a future while it is being worked out) and when it came (None: not yet)."""

    answer: Future[T] = field(default_factory=Future)
    settled_at: float | None = None


class OnceWithin(Generic[T]):
    """``run(key, action, recall, busy)``: ``action()``'s answer, unless the same key ran within ``window_s`` seconds
    of now (counted from its answer): then ``recall`` of that first answer; or unless it is running now: then
    ``busy()``, at once.

    Memory only, and bounded: answers expire after the window, and past ``capacity`` settled keys the oldest go. Two
    threads with the same key never both run ``action``; different keys never wait for each other.
    """

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic, capacity: int = 256) -> None:
        self.window_s, self.clock, self.capacity = window_s, clock, capacity
        self._entries: dict[Hashable, _Entry[T]] = {}
        self._lock = threading.Lock()

    def run(
        self, key: Hashable, action: Callable[[], T], recall: Callable[[T], T | None], busy: Callable[[], T]
    ) -> tuple[T, bool]:
        """(the answer, whether it is the first one's, recalled). ``recall(first)`` says what to answer a repeat
        now, or None when the first answer no longer stands (then ``action`` runs again); ``busy()`` answers (or
        raises) for a repeat that comes while the first is still being worked out."""
        while True:
            entry, mine = self._claim(key)
            if mine:
                return self._settle(key, entry, action), False
            if not entry.answer.done():
                return busy(), True
            recalled = recall(entry.answer.result())
            if recalled is not None:
                return recalled, True
            with self._lock:
                self._drop(key, entry)

    def _claim(self, key: Hashable) -> tuple[_Entry[T], bool]:
        """The key's live entry (False), or a new one this caller must settle (True)."""
        with self._lock:
            self._prune(self.clock())
            entry = self._entries.get(key)
            if entry is not None:
                return entry, False
            entry = self._entries[key] = _Entry()
            return entry, True

    def _settle(self, key: Hashable, entry: _Entry[T], action: Callable[[], T]) -> T:
        """Run ``action`` and hand its answer (or error) to whoever waits; an error is not remembered."""
        try:
            answer = action()
        except BaseException as exc:
            with self._lock:
                self._drop(key, entry)
            entry.answer.set_exception(exc)
            raise
        with self._lock:
            entry.settled_at = self.clock()
        entry.answer.set_result(answer)
        return answer

    def _drop(self, key: Hashable, entry: _Entry[T]) -> None:
        if self._entries.get(key) is entry:
            del self._entries[key]

    def _prune(self, now: float) -> None:
        """Forget answers older than the window, then the oldest settled ones beyond ``capacity`` (under the lock)."""
        settled = [(key, e) for key, e in self._entries.items() if e.settled_at is not None]
        for key, entry in settled:
            if now - (entry.settled_at or now) > self.window_s:
                del self._entries[key]
        excess = len(self._entries) + 1 - self.capacity  # room for the entry about to be added
        for key, entry in settled:
            if excess <= 0:
                break
            if self._entries.get(key) is entry:
                del self._entries[key]
                excess -= 1
