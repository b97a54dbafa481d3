"""Limits on the work requests may start: calls per user per minute, a time limit off the request thread, and how
many of one kind may be in flight at once, per user and on the whole Space."""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from backend.core.spec import SpecError

T = TypeVar("T")


class RateLimited(SpecError):
    """A user called an expensive action too often; the sentence says when to try again."""


class TimedOut(SpecError):
    """An action ran past its time limit; the caller stopped waiting for it."""


# What a refused caller reads, one function per refusal: the limiters say them, and the guards' table
# (backend/api/guards.py) shows them as a refusal at each limit would read.
def rate_refusal(what: str, calls: int, per_s: float, wait: float) -> str:
    """A call past ``calls`` within ``per_s`` seconds, ``wait`` seconds before the oldest one leaves the window.

    >>> rate_refusal("dry run", 5, 60.0, 12)
    'dry run: you used it 5 times in the last 60 s, the most allowed; try again in 12 s'
    """
    return (
        f"{what}: you used it {calls} times in the last {per_s:.0f} s, the most allowed; "
        f"try again in {max(math.ceil(wait), 1)} s"
    )


def time_refusal(what: str, timeout_s: float, advice: str) -> str:
    """An action that ran past ``timeout_s``, and what to do."""
    return f"{what}: it did not finish within {timeout_s:g} s; {advice}"


def user_refusal(what: str, mine: int) -> str:
    """One person already holding ``mine``, the most one person may."""
    return f"{what}: you already have {mine} running, the most one person may; wait for one to finish, then try again"


def space_refusal(what: str, everyone: int, setting: str, total: int, waited_s: float = 0.0) -> str:
    """The whole Space holding ``everyone`` at once, the most ``setting`` allows (after ``waited_s`` of waiting)."""
    waited = f" after {waited_s:g} s of waiting" if waited_s else ""
    return (
        f"{what}: this Space is running {everyone} at once{waited}, the most it allows ({setting} = {total}); "
        "try again in a few seconds"
    )


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
                raise RateLimited([rate_refusal(self.what, self.calls, self.per_s, wait)])
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
            raise TimedOut([time_refusal(self.what, self.timeout_s, self.advice)]) from None

    def close(self) -> None:
        """Stop the pool without waiting; a call still running is abandoned."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def int_setting(name: str, default: int, low: int = 1, high: int = 100_000) -> int:
    """A whole-number setting from the environment, clamped to ``low..high``; ``default`` when unset or unreadable.

    >>> int_setting("STUDIO_NOT_SET_ANYWHERE", 3)
    3
    """
    try:
        return max(low, min(high, int(os.environ.get(name, default))))
    except ValueError:
        return default


def count_out(counts: dict[str, int], key: str, amount: int = 1) -> int:
    """Take ``amount`` off ``key``'s count (the caller holds the lock), dropping the key at zero; what is left.

    >>> counts = {"alice": 2}
    >>> count_out(counts, "alice"), count_out(counts, "alice"), counts
    (1, 0, {})
    """
    left = counts.get(key, amount) - amount
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
    return max(left, 0)


def once_under(lock: threading.Lock | threading.Condition, action: Callable[[], None]) -> Callable[[], None]:
    """``action`` as a release that runs at most once, under ``lock``, however often it is called."""
    released = threading.Event()

    def release() -> None:
        with lock:
            if released.is_set():
                return
            released.set()
            action()

    return release


class Busy(SpecError):
    """As many of these are in flight as the limit allows (the user's own, or the Space's); the sentence says which."""


class InFlight:
    """At most ``per_user`` of one kind of work per user and ``total`` on the whole Space at once (in memory, per
    app process). ``hold`` counts one in until ``release``; a refusal (Busy) counts nothing. With ``wait_s`` a call
    over a limit waits its turn (at most that long) instead of being refused at once."""

    def __init__(self, what: str, per_user: int, total: int, setting: str):
        self.what, self.per_user, self.total, self.setting = what, per_user, total, setting
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)

    def _over(self, user_name: str) -> str | None:
        """Which limit a new one for ``user_name`` would pass ("user" or "space"), or None; under the lock."""
        if self._held.get(user_name, 0) >= self.per_user:
            return "user"
        if sum(self._held.values()) >= self.total:
            return "space"
        return None

    def _busy(self, over: str, user_name: str, waited_s: float) -> Busy:
        mine, everyone = self._held.get(user_name, 0), sum(self._held.values())
        if over == "user":
            if waited_s:
                return Busy(
                    [
                        f"{self.what}: your other {mine} still run after {waited_s:g} s of waiting, and one person "
                        f"may have {self.per_user} at once; try again when one has finished"
                    ]
                )
            return Busy([user_refusal(self.what, mine)])
        return Busy([space_refusal(self.what, everyone, self.setting, self.total, waited_s)])

    def waiting_sentence(self, over: str) -> str:
        """What a caller that waits its turn is told while it waits."""
        if over == "user":
            return f"{self.what}: waiting for your other {self.per_user} to end (one person may run that many at once)"
        return f"{self.what}: waiting for a free slot ({self.total} may run at once on this Space)"

    def hold(
        self, user_name: str, wait_s: float = 0.0, on_wait: Callable[[str], None] | None = None
    ) -> Callable[[], None]:
        """Count one in for ``user_name`` and return its release (safe to call more than once), or raise Busy.

        Over a limit, it waits up to ``wait_s`` seconds for a release (``on_wait`` is told once, with the sentence
        to show, before it waits); still over it then, Busy says which limit and for how long it waited."""
        start = time.monotonic()
        told = False
        with self._lock:
            while (over := self._over(user_name)) is not None:
                left = start + wait_s - time.monotonic()
                if left <= 0:
                    raise self._busy(over, user_name, wait_s)
                if on_wait is not None and not told:
                    told = True
                    self._lock.release()  # the callback may be slow (a UI message): not under the lock
                    try:
                        on_wait(self.waiting_sentence(over))
                    finally:
                        self._lock.acquire()
                    continue
                self._freed.wait(left)
            self._held[user_name] = self._held.get(user_name, 0) + 1

        def free() -> None:
            count_out(self._held, user_name)
            self._freed.notify_all()

        return once_under(self._lock, free)

    def in_flight(self, user_name: str | None = None) -> int:
        """How many are held now, by ``user_name`` or (None) by everyone."""
        with self._lock:
            return sum(self._held.values()) if user_name is None else self._held.get(user_name, 0)


def held_run(limit: InFlight, time_limit: TimeLimit, user_name: str, action: Callable[[], T]) -> T:
    """``action()`` off the request thread within ``time_limit``, counted in ``limit`` for ``user_name`` until it
    really ends (a call that timed out but still runs stays counted; one that never started is released)."""
    release = limit.hold(user_name)
    started = threading.Event()

    def held() -> T:
        started.set()
        try:
            return action()
        finally:
            release()

    try:
        return time_limit.run(held)
    except TimedOut:
        if not started.is_set():
            release()
        raise


class HeldStream:
    """An iterator that releases its ``InFlight`` hold when it ends, is closed, or is dropped unread (a browser that
    left mid-answer)."""

    def __init__(self, inner: Iterator[T], release: Callable[[], None]):
        self._inner, self._release = inner, release

    def __iter__(self) -> HeldStream:
        return self

    def __next__(self):
        try:
            return next(self._inner)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the inner stream and release the hold."""
        try:
            close = getattr(self._inner, "close", None)
            if close is not None:
                close()
        finally:
            self._release()

    def __del__(self) -> None:
        self.close()
