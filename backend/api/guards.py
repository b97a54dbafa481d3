"""The facade's guards, in one table: each row is one limiter of the facade (how often a person may call something,
how many may run at once, how long one may take), with the setting that sizes it, its default, what it limits and
the words its refusal starts with. :func:`build` makes every limiter the facade holds from its row, and
:func:`guard_readings` reads the rows with their values now (``StudioAPI.guards``, ``python -m backend status``).

A setting is read as the limiter reads it (``int_setting``: a whole number, clamped, the default when unset or
unreadable), once when the facade starts. A row without a setting is fixed in code.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, cast

from backend.data.uploads import CHECK_FOOTPRINT_BYTES
from backend.platform.hardware import memory_room
from backend.platform.limits import (
    InFlight,
    RateLimiter,
    TimeLimit,
    int_setting,
    rate_refusal,
    space_refusal,
    time_refusal,
    user_refusal,
)
from backend.training.reward_checks import CHECK_INTERPRETER_BYTES, check_memory_bytes

L = TypeVar("L", RateLimiter, InFlight, TimeLimit)
Kind = Literal["per minute", "at once", "seconds"]
KINDS: dict[type, Kind] = {RateLimiter: "per minute", InFlight: "at once", TimeLimit: "seconds"}
UPLOAD_CHECKS_PER_USER = 2  # one person's uploads wait their turn beyond this, however many they send at once
MAX_MODEL_CHECKS = 2


def upload_checks_fit(room: int | None) -> int:
    """Upload checks the memory ``room`` left at start holds (``CHECK_FOOTPRINT_BYTES`` each, at least one; when
    not known, one person's share).

    >>> upload_checks_fit(16 * 2**30), upload_checks_fit(2**30), upload_checks_fit(None)
    (6, 1, 2)
    """
    return max(1, room // CHECK_FOOTPRINT_BYTES) if room is not None else UPLOAD_CHECKS_PER_USER


def model_checks_fit(room: int | None) -> int:
    """Reward model checks the memory ``room`` left at start holds (a check's interpreter and its
    ``STUDIO_MODEL_CHECK_MEMORY_MB`` each; at least one, at most ``MAX_MODEL_CHECKS``).

    >>> model_checks_fit(64 * 2**30), model_checks_fit(2**30), model_checks_fit(None)
    (2, 1, 2)
    """
    footprint = check_memory_bytes() + CHECK_INTERPRETER_BYTES
    return max(1, min(MAX_MODEL_CHECKS, room // footprint)) if room is not None else MAX_MODEL_CHECKS


@dataclass(frozen=True)
class Guard(Generic[L]):
    """One row of the table: a limiter of the facade.

    ``what`` starts each of its sentences ("dry run: ..."); ``default`` is a number, or a function of the memory left
    at start (None: not known) described by ``default_note``; ``setting`` overrides it (None: fixed). An "at once"
    guard lets ``per_user`` run per person (``per_user_setting`` overrides); a "seconds" guard runs on ``workers``
    threads, a number or one per slot of an "at once" guard, and its refusal ends with ``advice``."""

    key: str
    limiter: type[L]
    what: str
    limits: str
    default: float | Callable[[int | None], int]
    setting: str | None = None
    default_note: str = ""
    per_user: int = 1
    per_user_setting: str | None = None
    workers: int | Guard[InFlight] = 2
    advice: str = ""

    @property
    def kind(self) -> Kind:
        """Per minute (calls per person), at once (per person and on the Space), or seconds (each, off the request)."""
        return KINDS[self.limiter]


# --- the table -----------------------------------------------------------------------------------------------------
UPLOAD_CHECKS = Guard(
    "upload_checks",
    InFlight,
    "upload check",
    "uploaded datasets checked at once",
    upload_checks_fit,
    "STUDIO_MAX_UPLOAD_CHECKS",
    default_note="as many as the memory left at start holds, 2.4 GB each, at least one",
    per_user=UPLOAD_CHECKS_PER_USER,
)
MODEL_CHECKS = Guard(
    "model_checks",
    InFlight,
    "reward model checks",
    "reward models loaded for a check at once",
    model_checks_fit,
    "STUDIO_MAX_MODEL_CHECKS",
    default_note="as many as the memory left at start holds, 3.8 GB each, 1 to 2",
)
BENCH_CALLS = Guard("bench_calls", RateLimiter, "reward bench", "reward bench runs", 20)
BENCH_TIME = Guard(
    "bench_time",
    TimeLimit,
    "reward bench",
    "one reward bench run",
    10.0,
    advice="use fewer or shorter completions, or simpler patterns",
)
# A remote environment's pre-flight talks to a stranger's server: a few at once per user and on the Space (at most
# half of Gradio's 8 slots of an event), so slow servers never hold the submit slots others need.
ENVIRONMENT_CHECKS = Guard(
    "environment_checks",
    InFlight,
    "environment checks",
    "remote environments' pre-flights at once",
    4,
    "STUDIO_MAX_ENVIRONMENT_CHECKS",
    per_user=2,
)
# Actions that play a model in an environment (dry runs, the arena): a few calls a minute each, off the request
# thread with a time limit, each pool with its own setting.
DRY_RUN_CALLS = Guard("dry_run_calls", RateLimiter, "dry run", "dry runs started", 5)
DRY_RUNS = Guard("dry_runs", InFlight, "dry run", "dry runs playing at once", 2, "STUDIO_MAX_DRY_RUNS")
DRY_RUN_TIME = Guard(
    "dry_run_time",
    TimeLimit,
    "dry run",
    "one dry run",
    300.0,
    workers=DRY_RUNS,  # each dry run let in has its own thread: a slow server holds only its own
    advice="lower environment.max_tool_calling_iterations or rollout.max_completion_length, or try a smaller model",
)
SPLIT_CALLS = Guard("split_calls", RateLimiter, "task split listing", "environments' task splits listed", 30)
ARENA_CALLS = Guard("arena_calls", RateLimiter, "arena play", "arena plays started", 5)
ARENA_PLAYS = Guard("arena_plays", InFlight, "arena play", "arena plays at once", 2, "STUDIO_MAX_ARENA_PLAYS")
# The chat's tool calls play the job's environment (a built-in one is a server process): one run at a time per
# person, each on its own thread (a slow server holds only its own).
TOOL_CALLS = Guard("tool_calls", RateLimiter, "tool calls", "chat tool-call runs started", 20)
TOOL_RUNS = Guard("tool_runs", InFlight, "tool calls", "chat tool-call runs at once", 4, "STUDIO_MAX_TOOL_RUNS")
TOOL_TIME = Guard(
    "tool_time",
    TimeLimit,
    "tool calls",
    "one chat tool-call run",
    90.0,
    workers=TOOL_RUNS,
    advice="the environment is slow or gone; clear the chat and try again",
)
CHAT_STREAMS = Guard(
    "chat_streams",
    InFlight,
    "chat",
    "chat answers streaming at once (a score counts as one)",
    8,
    "STUDIO_MAX_CHAT_STREAMS",
    per_user=2,
    per_user_setting="STUDIO_MAX_CHAT_STREAMS_PER_USER",
)
GUARDS: tuple[Guard, ...] = (
    UPLOAD_CHECKS,
    MODEL_CHECKS,
    BENCH_CALLS,
    BENCH_TIME,
    ENVIRONMENT_CHECKS,
    DRY_RUN_CALLS,
    DRY_RUNS,
    DRY_RUN_TIME,
    SPLIT_CALLS,
    ARENA_CALLS,
    ARENA_PLAYS,
    TOOL_CALLS,
    TOOL_RUNS,
    TOOL_TIME,
    CHAT_STREAMS,
)
PER_S = 60.0  # a "per minute" guard's window


# --- reading and building ------------------------------------------------------------------------------------------
def guard_value(guard: Guard, room: int | None = None) -> float:
    """The guard's number now: its setting read as its limiter reads it, else its default (``room``: the memory left,
    for a default sized by it; None measures it).

    >>> guard_value(DRY_RUNS), guard_value(DRY_RUN_TIME)
    (2, 300.0)
    """
    if callable(guard.default):
        default: float = guard.default(memory_room() if room is None else room)
    else:
        default = guard.default
    return int_setting(guard.setting, int(default)) if guard.setting else default


def guard_per_user(guard: Guard) -> int:
    """How many of an "at once" guard one person may hold now."""
    return int_setting(guard.per_user_setting, guard.per_user) if guard.per_user_setting else guard.per_user


def guard_workers(guard: Guard[TimeLimit]) -> int:
    """A "seconds" guard's threads: its number, or one per slot of the "at once" guard it follows."""
    return guard.workers if isinstance(guard.workers, int) else int(guard_value(guard.workers))


_BUILT: weakref.WeakKeyDictionary[object, Guard] = weakref.WeakKeyDictionary()


def build(guard: Guard[L], room: int | None = None) -> L:
    """The limiter of ``guard``'s row, its settings read now: the one way the facade makes a limiter."""
    made: RateLimiter | InFlight | TimeLimit
    if guard.limiter is RateLimiter:
        made = RateLimiter(guard.what, int(guard_value(guard)), PER_S)
    elif guard.limiter is InFlight:
        assert guard.setting is not None, f"{guard.key}: an at-once guard names its setting"
        made = InFlight(guard.what, guard_per_user(guard), int(guard_value(guard, room)), guard.setting)
    else:
        made = TimeLimit(
            guard.what, guard_value(guard), workers=guard_workers(cast(Guard[TimeLimit], guard)), advice=guard.advice
        )
    _BUILT[made] = guard
    return cast(L, made)


def guard_of(limiter: object) -> Guard | None:
    """The row ``limiter`` was built from, or None when :func:`build` did not make it."""
    return _BUILT.get(limiter)


@dataclass(frozen=True)
class GuardReading:
    """A row with its values now: ``value`` (a number a minute, at once on the Space, or seconds), one person's share
    of an "at once" guard (``per_user``, else None), the default as words, and the sentences a refusal at the limit
    reads (``refusals``)."""

    key: str
    kind: Kind
    limits: str
    setting: str | None
    value: float
    default: str
    per_user: int | None
    per_user_setting: str | None
    refusals: tuple[str, ...]

    def line(self) -> str:
        """One line for a listing, e.g. ``STUDIO_MAX_DRY_RUNS = 2: dry runs playing at once, 1 per person; default
        2``."""
        amount = {"per minute": f"{self.value:g} a minute per person", "seconds": f"{self.value:g} s each"}
        said = f"{self.setting} = {self.value:g}" if self.setting else amount.get(self.kind, f"{self.value:g}")
        share = f", {self.per_user} per person" if self.per_user is not None else ""
        if self.per_user_setting:
            share += f" ({self.per_user_setting} = {self.per_user})"
        return f"{said}: {self.limits}{share}; " + (f"default {self.default}" if self.setting else "fixed")


def refusals(guard: Guard, value: float, per_user: int) -> tuple[str, ...]:
    """The sentences a person refused by ``guard`` at ``value`` reads: a rate's as just after the last call allowed,
    a time limit's, or an "at once" guard's on the Space (naming its setting) and then for one person."""
    if guard.limiter is RateLimiter:
        return (rate_refusal(guard.what, int(value), PER_S, PER_S),)
    if guard.limiter is TimeLimit:
        return (time_refusal(guard.what, value, guard.advice),)
    assert guard.setting is not None, f"{guard.key}: an at-once guard names its setting"
    return space_refusal(guard.what, int(value), guard.setting, int(value)), user_refusal(guard.what, per_user)


def guard_readings(room: int | None = None) -> list[GuardReading]:
    """Every row with its values read now, as the facade's limiters read them when it starts (``room``: as in
    :func:`guard_value`)."""
    readings = []
    for guard in GUARDS:
        value, per_user = guard_value(guard, room), guard_per_user(guard)
        default = guard.default_note if callable(guard.default) else f"{guard.default:g}"
        shared = per_user if guard.limiter is InFlight else None
        readings.append(
            GuardReading(
                guard.key,
                guard.kind,
                guard.limits,
                guard.setting,
                value,
                default,
                shared,
                guard.per_user_setting,
                refusals(guard, value, per_user),
            )
        )
    return readings
