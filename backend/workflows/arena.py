"""The agent arena: a finished environment job's base and tuned models play the same episodes side by side.

Both sides of an episode get the same dataset row (so the same ``reset``) and the same seed, and play with the
job's chat template, tools, token budget and sampling (``backend/environments/episodes.py``, the dry run's and the
success-rate evaluation's code). Both run on one model in memory: the chat's (``ComparisonChat``), with PEFT's
mixed-adapter batches, so a round of model turns of every episode on both sides is one ``generate``.

Episode ``i`` plays row ``i % len(rows)`` of the rows the job's evaluation played (its held-out rows, else its
training rows) with seed ``training.seed + i``, as ``success_rates`` does; greedy episodes therefore repeat the job's
stored success rate. With a ``split`` (an environment's ``test`` split, OpenEnv's Task API) episode ``i`` plays task
``i`` of that split instead (``reset(split=..., index=i)``), as the evaluation of an environment with a test split
does. Played pairs are kept per user and job (``arena/<user>/<job id>/<n>.json``), each written whole under a
temporary name and linked into place, so a link ``?job=<id>&episode=<n>`` opens the same pair again.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from backend.core.paths import DataPaths, storage_problem, user_folder
from backend.core.spec import JobSpec
from backend.data.loading import load_training_dataset, split_holdout
from backend.environments.connection import EnvironmentUnavailable
from backend.environments.episodes import Episode, EpisodeSettings, episode_start, iter_episodes
from backend.environments.runtime import INTERACTIVE_BUDGET_S, open_environment
from backend.models.mixed_batch import BASE_ADAPTER, TUNED_ADAPTER
from backend.training.evaluation import START_ADAPTER

Sampling = Literal["greedy", "training"]
SIDES = ("base", "tuned")
ARENA_MAX_EPISODES = 32  # per side, one Play N
ARENA_GROUP = 8  # episode pairs played at once (2 x this many environment sessions)
ARENA_TIME_LIMIT_S = 600.0  # a play that runs longer stops, and says so
_EPISODE_FILE = re.compile(r"^(\d{1,9})\.json$")


class ArenaError(ValueError):
    """Something the user can act on: no environment, a row out of range, an episode that does not exist."""


@dataclass(frozen=True)
class ArenaSetup:
    """What an arena plays for one job: the environment job's spec (its environment, rollout and data, with the
    picked job's model), the tuned adapter and, for a staged job, its parent's adapter."""

    job_id: str
    spec: JobSpec  # the spec whose environment and rollout settings are played
    environment_job_id: str  # the job that named the environment (the picked job or an ancestor)
    parent_adapter: Path | None = None
    parent_job_id: str | None = None
    evaluation_split: str | None = None  # the split the job's own evaluation played (None: it played rows)

    @property
    def environment(self) -> str:
        """The environment's name as the spec gives it (``builtin:arithmetic``, a Space id, a URL)."""
        return self.spec.environment.name or ""

    def base_label(self, base: str) -> str:
        """Who plays the left side."""
        if base == "parent":
            return f"job {self.parent_job_id}'s adapter (where this job started)"
        return "the base model (adapter off)"


@dataclass
class ArenaPair:
    """One episode played by both sides: same row, same seed."""

    index: int  # episode i: row i % len(rows) (task i of ``split``), seed training.seed + i
    row: int
    seed: int
    base: Episode
    tuned: Episode
    episode: int | None = None  # its number in the user's arena for this job, once kept
    split: str | None = None  # the environment's split whose task ``row`` is, or None for a dataset row

    @property
    def over(self) -> bool:
        """Whether both sides' episodes ended."""
        return self.base.over and self.tuned.over

    def to_dict(self) -> dict[str, Any]:
        """The pair as plain JSON-ready data."""
        return {
            "index": self.index,
            "row": self.row,
            "seed": self.seed,
            "episode": self.episode,
            "base": self.base.to_dict(),
            "tuned": self.tuned.to_dict(),
            "split": self.split,
        }


@dataclass
class ArenaPlay:
    """A play as it stands: its pairs (finished or in progress), who the sides are, the tools and what to say."""

    job_id: str
    environment: str
    base_label: str
    sampling: str
    pairs: list[ArenaPair] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    over: bool = False
    note: str = ""

    def summary(self) -> str:
        """One line: how many episodes, and each side's successes (while playing, those over so far).

        >>> ArenaPlay("j", "e", "b", "greedy").summary()
        'Playing…'
        """
        done = [pair for pair in self.pairs if pair.over]
        wins = {side: sum(getattr(pair, side).success for pair in done) for side in SIDES}
        if not self.over:
            so_far = f" {len(done)} over so far: base {wins['base']}, tuned {wins['tuned']} succeeded." if done else ""
            return f"Playing {len(self.pairs)} episode(s) per side…{so_far}" if self.pairs else "Playing…"
        if not done:
            return "No episode was played to its end."
        n = len(done)
        return (
            f"{n} episode(s) per side: base {wins['base']}/{n} succeeded ({wins['base'] / n:.0%}), "
            f"tuned {wins['tuned']}/{n} ({wins['tuned'] / n:.0%})"
        )


# --- what is played ------------------------------------------------------------------------------------------------


def episode_rows(spec: JobSpec, uploads_dir: Path | None) -> list[dict[str, Any]]:
    """The rows the job's environment evaluation played: its held-out rows, else its training rows (every column,
    as the environment's ``reset`` receives them)."""
    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True, uploads_dir=uploads_dir)
    train, held_out = split_holdout(dataset, spec.eval.holdout_fraction, spec.eval.holdout_rows, spec.training.seed)
    rows = held_out if held_out is not None else train
    return [rows[i] for i in range(len(rows))]


def split_tasks(spec: JobSpec, split: str) -> int:
    """How many tasks the job's environment holds in ``split`` (OpenEnv's Task API); ArenaError when it has no such
    split. A built-in environment's splits are read here, a remote one's from its server."""
    from backend.environments.builtin.splits import SPLITS, builtin_splits
    from backend.environments.connection import resolve_url, time_budget
    from backend.environments.runtime import builtin_of
    from backend.environments.tasks import task_catalog

    builtin = builtin_of(spec.environment)
    if builtin is not None:
        if split not in SPLITS:
            raise ArenaError(f"the {builtin.name} environment's splits are {', '.join(SPLITS)}, not {split!r}")
        return len(builtin_splits(builtin.name).tasks(split))
    try:
        with time_budget(INTERACTIVE_BUDGET_S):
            catalog = task_catalog(resolve_url(spec.environment.name or ""))
    except EnvironmentUnavailable as exc:
        raise ArenaError(f"the environment could not be asked for its splits: {str(exc).rstrip('.')}") from None
    found = next((s for s in catalog.splits if s.name == split), None) if catalog is not None else None
    if found is None or not found.tasks:
        offered = f"its splits are {catalog.summary()}" if catalog is not None else "it offers no task splits"
        raise ArenaError(f"the environment has no {split!r} split with tasks to play: {offered}")
    return found.tasks


def episode_settings(spec: JobSpec, sampling: Sampling) -> EpisodeSettings:
    """The job's episode settings; greedy (as the evaluation plays) or sampled as in training."""
    settings = EpisodeSettings.from_spec(spec)
    return replace(settings, temperature=0.0) if sampling == "greedy" else settings


def tool_schemas(environment) -> list[dict[str, Any]]:
    """The tools the model is given, as JSON schemas (what a chat template renders and a DPO row's ``tools`` holds)."""
    from transformers.utils import get_json_schema

    from backend.environments.adapter import tool_methods

    return [get_json_schema(method) for method in tool_methods(environment)]


def play(
    setup: ArenaSetup,
    model,
    tokenizer,
    lock: threading.Lock,
    rows: list[dict[str, Any]],
    indices: list[int],
    *,
    base: str = "base",
    sampling: Sampling = "greedy",
    seed: int | None = None,
    first_message: str | None = None,
    time_limit_s: float = ARENA_TIME_LIMIT_S,
    before_generate: Callable[[], None] | None = None,
    split: str | None = None,
) -> Iterator[ArenaPlay]:
    """Play episodes ``indices`` on both sides (with ``split``, episode i is that split's task i, not a row of
    ``rows``), yielding the play after the opening and after every round of model turns; the last yield is over.
    Sessions are closed and a built-in server stopped however it ends (a closed iterator included). ``model`` is a
    PeftModel with the tuned adapter (and, for ``base="parent"``, the parent's loaded as ``START_ADAPTER``); ``lock``
    is held around each round (the model is shared with the chat)."""
    spec = setup.spec
    settings = episode_settings(spec, sampling)
    left = START_ADAPTER if base == "parent" else BASE_ADAPTER
    state = ArenaPlay(
        setup.job_id,
        setup.environment,
        setup.base_label(base),
        "greedy (as the job's evaluation)"
        if sampling == "greedy"
        else f"sampled at temperature {settings.temperature:g} (as in training)",
    )
    deadline = time.monotonic() + time_limit_s
    group = min(len(indices), ARENA_GROUP)
    try:
        with open_environment(spec, sessions=2 * group, budget_s=INTERACTIVE_BUDGET_S) as environment:
            start_row = _split_rows(environment.url, split, spec.training.seed) if split else None
            for first in range(0, len(indices), group):
                chunk = indices[first : first + group]
                sessions = [environment.factory() for _ in range(2 * len(chunk))]
                try:
                    if not state.tools:
                        state.tools = tool_schemas(sessions[0])
                    chunk_rows, seeds, row_numbers = [], [], []
                    for i in chunk:
                        if start_row is not None:
                            row, number, episode_seed = start_row(i)
                        else:
                            number, episode_seed = episode_start(len(rows), spec.training.seed, i)
                            row = dict(rows[number])
                        if seed is not None:  # the user's seed for the first episode, counted on from it
                            episode_seed = seed + (i - indices[0])
                        if first_message:
                            row["prompt"] = [{"role": "user", "content": first_message}]
                        chunk_rows += [row, row]
                        seeds += [episode_seed, episode_seed]
                        row_numbers.append(number)
                    episodes = iter_episodes(
                        model,
                        tokenizer,
                        sessions,
                        chunk_rows,
                        settings,
                        seeds,
                        adapters=[left, TUNED_ADAPTER] * len(chunk),
                        row_seeded=True,
                    )
                    done = list(state.pairs)
                    while True:
                        with lock:
                            if before_generate is not None:
                                before_generate()
                            played = next(episodes, None)
                        if played is None:
                            break
                        state.pairs = done + [
                            ArenaPair(i, row_numbers[k], seeds[2 * k], played[2 * k], played[2 * k + 1], split=split)
                            for k, i in enumerate(chunk)
                        ]
                        if time.monotonic() > deadline:
                            raise TimeoutError
                        yield replace(state, pairs=list(state.pairs))  # each update stands as it was
                finally:
                    for session in sessions:
                        session._close()
    except TimeoutError:
        state.pairs = [pair for pair in state.pairs if pair.over]
        state.note = (
            f"Stopped after {time_limit_s:g} s with {len(state.pairs)} episode(s) per side played; "
            "play fewer episodes at once, or lower the job's token budget."
        )
    except EnvironmentUnavailable as exc:  # before any episode began (unreachable, at capacity) or during a reset
        what = "stopped answering" if state.pairs else "could not be reached"
        state.note = f"The environment {what}: {str(exc).rstrip('.')}. No session was left open."
    lost = [pair for pair in state.pairs if pair.base.error or pair.tuned.error]
    if lost and not state.note:
        error = (lost[0].base.error or lost[0].tuned.error or "").rstrip(".")
        state.note = (
            f"The environment stopped answering during {len(lost)} episode(s): {error}. Those episodes count as no "
            "success; their sessions were closed."
        )
    state.over = True
    yield state


def _split_rows(url: str, split: str, seed: int) -> Callable[[int], tuple[dict[str, Any], int, int]]:
    """Episode i of a split's play: (the row that plays task i of ``split``, i, its seed ``seed + i``)."""
    from backend.environments.tasks import get_task, task_catalog, task_row

    catalog = task_catalog(url)
    if catalog is None:
        raise EnvironmentUnavailable(f"the environment no longer offers its {split!r} split")
    return lambda i: (task_row(get_task(url, catalog, split, i), split, i), i, seed + i)


# --- kept pairs ----------------------------------------------------------------------------------------------------


def arena_folder(paths: DataPaths, owner: str, job_id: str) -> Path:
    """Where one user's played pairs of one job are kept."""
    return paths.root / "arena" / user_folder(owner) / job_id


def keep_pairs(paths: DataPaths, owner: str, play_state: ArenaPlay) -> ArenaPlay:
    """Number and keep every finished pair of a play (``arena/<user>/<job>/<n>.json``): each file is written whole
    under a temporary name, then linked to the first free number, so concurrent plays never share a number and a
    crash leaves no half a pair. On a full or read-only disk the play is still shown, with a note that it was not
    kept."""
    folder = arena_folder(paths, owner, play_state.job_id)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for pair in play_state.pairs:
            if pair.over and pair.episode is None:
                _keep(folder, pair, play_state)
    except OSError as exc:
        play_state.note = " ".join(
            filter(None, [play_state.note, f"These episodes were not kept (no link): {storage_problem(exc)}."])
        )
    return play_state


def _keep(folder: Path, pair: ArenaPair, play_state: ArenaPlay) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".pair-", dir=folder)
    try:
        number = _next_number(folder)
        while True:
            pair.episode = number
            data = {
                **pair.to_dict(),
                "job_id": play_state.job_id,
                "environment": play_state.environment,
                "base_label": play_state.base_label,
                "sampling": play_state.sampling,
                "tools": play_state.tools,
                "played_at": time.time(),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(data, ensure_ascii=False).encode("utf-8"), 0)
            os.fsync(fd)
            try:
                os.link(tmp, folder / f"{number}.json")  # fails if another play took the number first
                return
            except FileExistsError:
                number = _next_number(folder)
    except BaseException:
        pair.episode = None
        raise
    finally:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)


def _numbers(folder: Path) -> list[int]:
    return sorted(int(m.group(1)) for f in folder.iterdir() if (m := _EPISODE_FILE.match(f.name)))


def _next_number(folder: Path) -> int:
    return max(_numbers(folder), default=0) + 1


def kept_pair(paths: DataPaths, owner: str, job_id: str, episode: int) -> dict[str, Any]:
    """A kept pair as stored (with its tools, labels and settings); ArenaError when there is none."""
    path = arena_folder(paths, owner, job_id) / f"{int(episode)}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ArenaError(f"episode {episode} of job {job_id} was not found among your arena episodes") from None


def kept_numbers(paths: DataPaths, owner: str, job_id: str) -> list[int]:
    """The numbers of a user's kept pairs of a job, in order."""
    folder = arena_folder(paths, owner, job_id)
    return _numbers(folder) if folder.is_dir() else []
