"""Limits on the work one request may start: calls per user per minute, and a time limit off the request thread."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from backend.spec import SpecError

T = TypeVar("T")


class RateLimited(SpecError):
    """A user called an expensive action too often; the sentence says when to try again."""


class TimedOut(SpecError):
    """An action ran past its time limit; the caller stopped waiting for it."""


class RateLimiter:
    """At most ``calls`` per user within any ``per_s`` seconds (a sliding window kept in memory)."""

    def __init__(self, what: str, calls: int, per_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.what, self.calls, self.per_s, self.clock = what, calls, per_s, clock
        self._recent: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, user_name: str) -> None:
        """Count one call for ``user_name``, or raise RateLimited (that call is not counted)."""
        now = self.clock()
        with self._lock:
            recent = self._recent.setdefault(user_name, deque())
            while recent and recent[0] <= now - self.per_s:
                recent.popleft()
            if len(recent) >= self.calls:
                wait = math.ceil(recent[0] + self.per_s - now)
                raise RateLimited([
                    f"{self.what}: you used it {self.calls} times in the last {self.per_s:.0f} s, the most allowed; "
                    f"try again in {max(wait, 1)} s"
                ])
            recent.append(now)
            # Users who stopped calling would otherwise keep an entry forever.
            for name in [n for n, q in self._recent.items() if not q or q[-1] <= now - self.per_s]:
                del self._recent[name]


class TimeLimit:
    """Runs actions on a few worker threads and waits at most ``timeout_s`` for each.

    A thread cannot be killed: the action's own limits (per-match regex timeouts, input caps, environment
    timeouts) bound how long it really runs; this bounds how long a request waits, and the pool size bounds
    how many such actions run at once. A call that waits for a free thread counts that wait too.
    """

    def __init__(self, what: str, timeout_s: float, workers: int = 2, advice: str = "try smaller input"):
        self.what, self.timeout_s, self.advice = what, timeout_s, advice
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"studio-{what.replace(' ', '-')}")

    def run(self, action: Callable[[], T]) -> T:
        """``action()``'s result, or TimedOut when it takes longer than ``timeout_s``."""
        future = self._pool.submit(action)
        try:
            return future.result(timeout=self.timeout_s)
        except FutureTimeout:
            future.cancel()  # still queued: it never starts
            raise TimedOut([f"{self.what}: it did not finish within {self.timeout_s:g} s; {self.advice}"]) from None

    def close(self) -> None:
        """Stop the pool without waiting; a call still running is abandoned."""
        self._pool.shutdown(wait=False, cancel_futures=True)
