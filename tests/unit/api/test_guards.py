"""The facade's guards come from one table (backend/api/guards.py): every limiter the facade holds is built from its
row, each setting is written once and moves its own guard only, and the readings say what a refusal says."""

from __future__ import annotations

import ast
import json

import pytest

from backend.api import GuardReading, StudioAPI
from backend.api.guards import ARENA_PLAYS, DRY_RUNS, GUARDS, build, guard_of, guard_readings
from backend.platform.limits import Busy, InFlight, RateLimited, RateLimiter, TimeLimit
from tests.helpers import ROOT

LIMITERS = (RateLimiter, InFlight, TimeLimit)
SETTINGS = [name for guard in GUARDS for name in (guard.setting, guard.per_user_setting) if name]
ROOM = 16 * 2**30  # the memory left, fixed so that a guard sized by it reads the same twice


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    """No guard's setting in the environment: every guard at its default (the shared ``api`` is built so)."""
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def held_limiters(api: StudioAPI) -> dict[int, tuple[str, object]]:
    """Every distinct limiter the facade holds, by id: (where it was first found, the limiter), walking the attributes
    of the facade, its parts and their own helpers (the core, the chat's tool runs), each object once."""
    found: dict[int, tuple[str, object]] = {}
    seen: set[int] = set()
    todo: list[tuple[str, object]] = [("api", api)]
    while todo:
        where, holder = todo.pop()
        if id(holder) in seen:
            continue
        seen.add(id(holder))
        for name, value in vars(holder).items():
            if isinstance(value, LIMITERS):
                found.setdefault(id(value), (f"{where}.{name}", value))
            elif type(value).__module__.startswith("backend.api") and hasattr(value, "__dict__"):
                todo.append((f"{where}.{name}", value))
    return found


def test_every_limiter_the_facade_holds_is_built_from_its_row_and_every_row_is_built_once(api):
    held = list(held_limiters(api).values())
    assert len(held) == len(GUARDS) == 15
    rows = {where: guard_of(limiter) for where, limiter in held}
    assert None not in rows.values(), [where for where, row in rows.items() if row is None]
    assert sorted(row.key for row in rows.values() if row) == sorted(guard.key for guard in GUARDS)
    assert all(isinstance(limiter, guard_of(limiter).limiter) for _, limiter in held)  # type: ignore[union-attr]


def test_the_table_writes_each_setting_once_and_no_other_module_writes_one_or_builds_a_limiter():
    assert len(SETTINGS) == len(set(SETTINGS)) == 8
    assert len({guard.key for guard in GUARDS}) == len(GUARDS)
    allowed = {"backend/api/guards.py", "backend/platform/limits.py"}
    found = []
    for path in sorted((ROOT / "backend").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in SETTINGS:
                found.append(f"{where}:{node.lineno} writes {node.value}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                "RateLimiter",
                "InFlight",
                "TimeLimit",
            ):
                found.append(f"{where}:{node.lineno} builds a {node.func.id}")  # type: ignore[attr-defined]
    assert not found


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_setting_moves_its_own_guard_and_no_other(unset, setting):
    before = {r.key: (r.value, r.per_user) for r in guard_readings(room=ROOM)}
    unset.setenv(setting, "7")
    after = {r.key: (r.value, r.per_user) for r in guard_readings(room=ROOM)}
    moved = {key for key in before if before[key] != after[key]}
    owner = next(guard.key for guard in GUARDS if setting in (guard.setting, guard.per_user_setting))
    assert moved == {owner} and 7 in after[owner]


def test_the_arena_and_the_dry_runs_have_a_pool_each_with_its_own_setting(tmp_path, unset):
    unset.setenv("STUDIO_MAX_ARENA_PLAYS", "5")
    first = StudioAPI(tmp_path / "a", scheduler="none")
    try:
        assert (first.arena._plays.total, first.environments._dry_runs.total) == (5, 2)  # the default
    finally:
        first.close()
    unset.delenv("STUDIO_MAX_ARENA_PLAYS")
    unset.setenv("STUDIO_MAX_DRY_RUNS", "3")
    second = StudioAPI(tmp_path / "b", scheduler="none")
    try:
        assert (second.arena._plays.total, second.environments._dry_runs.total) == (2, 3)
        with pytest.raises(Busy, match=r"arena play: this Space is running 2 at once.*\(STUDIO_MAX_ARENA_PLAYS = 2\)"):
            for name in ("ann", "ben", "cat"):
                second.arena._plays.hold(name)
    finally:
        second.close()
    assert (ARENA_PLAYS.default, DRY_RUNS.default) == (2, 2)


def test_the_facade_lists_each_guard_with_its_value_now_and_the_sentences_its_refusals_read(api, unset):
    unset.setenv("STUDIO_MAX_DRY_RUNS", "3")
    readings = {reading.key: reading for reading in api.guards()}
    assert all(isinstance(reading, GuardReading) for reading in readings.values())
    assert list(readings) == [guard.key for guard in GUARDS]
    dry_runs = readings["dry_runs"]
    assert (dry_runs.setting, dry_runs.value, dry_runs.default, dry_runs.per_user) == ("STUDIO_MAX_DRY_RUNS", 3, "2", 1)
    assert dry_runs.line() == "STUDIO_MAX_DRY_RUNS = 3: dry runs playing at once, 1 per person; default 2"
    assert readings["dry_run_calls"].line() == "5 a minute per person: dry runs started; fixed"
    assert readings["dry_run_time"].refusals == (
        "dry run: it did not finish within 300 s; lower environment.max_tool_calling_iterations or "
        "rollout.max_completion_length, or try a smaller model",
    )
    streams = readings["chat_streams"]
    assert streams.line().startswith("STUDIO_MAX_CHAT_STREAMS = 8: chat answers streaming at once")
    assert "2 per person (STUDIO_MAX_CHAT_STREAMS_PER_USER = 2); default 8" in streams.line()


def test_each_reading_quotes_what_the_limiter_built_from_its_row_says_at_its_limit(unset):
    readings = {reading.key: reading for reading in guard_readings(room=ROOM)}
    for guard in GUARDS:
        reading, limiter = readings[guard.key], build(guard, room=ROOM)
        if isinstance(limiter, InFlight):
            for name in range(limiter.total):
                limiter.hold(f"user{name}")
            with pytest.raises(Busy) as space:
                limiter.hold("one more")
            alone = build(guard, room=ROOM)
            for _ in range(alone.per_user):
                alone.hold("ann")
            with pytest.raises(Busy) as own:
                alone.hold("ann")
            assert (str(space.value), str(own.value)) == reading.refusals
        elif isinstance(limiter, RateLimiter):
            for _ in range(limiter.calls):
                limiter.check("ann")
            with pytest.raises(RateLimited) as rate:
                limiter.check("ann")
            assert (str(rate.value),) == reading.refusals
        else:
            assert reading.refusals == (f"{guard.what}: it did not finish within {reading.value:g} s; {guard.advice}",)
            limiter.close()


def test_the_status_command_lists_every_guard_with_its_value_now(data_dir, unset, capsys):
    """``python -m backend status`` (and ``--json``): each guard once, a setting changed in the environment shown with
    its new value."""
    from backend.cli import main

    unset.setenv("STUDIO_MAX_ARENA_PLAYS", "5")
    assert main(["status"]) == 0
    printed = capsys.readouterr().out
    listed = printed.split("Guards", 1)[1].splitlines()[1:]
    assert len(listed) == len(GUARDS)
    assert "  STUDIO_MAX_ARENA_PLAYS = 5: " in printed and "  STUDIO_MAX_DRY_RUNS = 2: " in printed
    assert main(["status", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["guards"]
    assert [g["key"] for g in shown] == [g.key for g in GUARDS]
    assert {g["setting"]: g["value"] for g in shown if g["setting"]}["STUDIO_MAX_ARENA_PLAYS"] == 5
