"""An environment's held-out tasks, read through OpenEnv's Task API: which splits a server offers
(``/list_environments``, ``/<name>/splits``, ``/<name>/num_tasks``), one task (``/<name>/task``), and the rows an
evaluation plays: the test split's tasks, each started with ``reset(split="test", index=i)``, where the server has
one; else the dataset's rows, as before.

A server without the Task API (most Spaces today; openenv answers 501 or 404) simply has no splits: nothing here
fails a job or a form.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from backend.environments.connection import EnvironmentUnavailable, get_json

log = logging.getLogger("studio.environments")

TEST = "test"
# The prompt of a test task that brings none: the reset observation, appended to it, poses the task.
TASK_PROMPT = "Solve this task with the tools you are given."
# How an evaluation's episodes were drawn (the environment evaluation's ``episodes_from``).
FROM_TEST_SPLIT = "test split"
FROM_HELD_OUT_ROWS = "held-out rows"
FROM_TRAINING_ROWS = "training rows"


@dataclass(frozen=True)
class TaskSplit:
    """One split a server offers: its name, its kind (train, validation or test) and how many tasks it holds."""

    name: str
    kind: str
    tasks: int | None  # None when the server would not say


@dataclass(frozen=True)
class TaskCatalog:
    """The splits an environment server offers through the Task API, under the name its routes use."""

    env_name: str
    splits: tuple[TaskSplit, ...]

    def test_split(self) -> TaskSplit | None:
        """The split to evaluate on: the one of kind ``test`` (else the one named so) that holds tasks, or None."""
        for split in sorted(self.splits, key=lambda s: (s.kind != TEST, s.name != TEST)):
            if (split.kind == TEST or split.name == TEST) and split.tasks:
                return split
        return None

    def summary(self) -> str:
        """The splits in a line, e.g. ``train (4800 tasks), test (200 tasks)``.

        >>> TaskCatalog("x", (TaskSplit("train", "train", 10), TaskSplit("test", "test", None))).summary()
        'train (10 tasks), test'
        """
        return ", ".join(s.name + (f" ({s.tasks} tasks)" if s.tasks is not None else "") for s in self.splits)


def _route(catalog_name: str, what: str) -> str:
    return f"/{quote(catalog_name, safe='')}/{what}"


def task_catalog(url: str, *, timeout_s: float = 10.0) -> TaskCatalog | None:
    """The splits the server at ``url`` offers, or None when it offers none (no Task API, or no splits)."""
    try:
        names = get_json(url, "/list_environments", timeout_s)
        if not isinstance(names, list) or not names or not isinstance(names[0], str):
            return None
        name = names[0]
        listed = get_json(url, _route(name, "splits"), timeout_s)
        if not isinstance(listed, list):
            return None
        splits = []
        for entry in listed[:16]:
            entry = {"name": entry} if isinstance(entry, str) else entry
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            split = entry["name"]
            kind = entry.get("type") if isinstance(entry.get("type"), str) else split
            splits.append(TaskSplit(split, kind, _count(url, name, split, timeout_s)))
    except EnvironmentUnavailable as exc:
        log.info("no task splits at %s: %s", url, exc)
        return None
    return TaskCatalog(name, tuple(splits)) if splits else None


def _count(url: str, name: str, split: str, timeout_s: float) -> int | None:
    try:
        answer = get_json(url, _route(name, "num_tasks"), timeout_s, payload={"split": split})
    except EnvironmentUnavailable:
        return None
    count = answer.get("num_tasks") if isinstance(answer, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def get_task(url: str, catalog: TaskCatalog, split: str, index: int, *, timeout_s: float = 10.0) -> Any:
    """Task ``index`` of ``split`` as the server describes it (any JSON: the Task API leaves its shape open)."""
    answer = get_json(url, _route(catalog.env_name, "task"), timeout_s, payload={"split": split, "index": index})
    return answer.get("task") if isinstance(answer, dict) else None


def task_row(task: Any, split: str, index: int) -> dict[str, Any]:
    """The row that plays task ``index`` of ``split``: the task's own prompt (text or chat messages) where it brings
    one, else a short instruction (the reset observation poses the task), and ``split`` and ``index`` for reset.

    >>> task_row({"prompt": "Add 2 and 3."}, "test", 4)
    {'prompt': [{'role': 'user', 'content': 'Add 2 and 3.'}], 'split': 'test', 'index': 4}
    >>> task_row("opaque", "test", 0)["prompt"][0]["content"] == TASK_PROMPT
    True
    """
    prompt = task.get("prompt") if isinstance(task, dict) else None
    if isinstance(prompt, str) and prompt.strip():
        messages = [{"role": "user", "content": prompt}]
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") for m in prompt)
    ):
        messages = [{"role": str(m["role"]), "content": m["content"]} for m in prompt]
    else:
        messages = [{"role": "user", "content": TASK_PROMPT}]
    return {"prompt": messages, "split": split, "index": index}


@dataclass
class EpisodeSource:
    """The rows an environment's evaluation plays and how they were drawn (kept with its result)."""

    rows: list[dict[str, Any]]
    episodes: str  # FROM_TEST_SPLIT, FROM_HELD_OUT_ROWS or FROM_TRAINING_ROWS
    split: str | None = None
    indexes: list[int] = field(default_factory=list)

    @property
    def held_out(self) -> bool:
        """Whether the episodes are tasks the environment holds out (its test split)."""
        return self.episodes == FROM_TEST_SPLIT

    def record(self) -> dict[str, Any]:
        """What the environment evaluation keeps of it: the split played, the task indexes, whether held out."""
        kept: dict[str, Any] = {"episodes_from": self.episodes, "held_out": self.held_out, "split": self.split}
        if self.indexes:
            kept["task_indexes"] = self.indexes
        return kept


def evaluation_episodes(
    url: str, rows: list[dict[str, Any]], episodes: int, rows_held_out: bool, *, timeout_s: float = 10.0
) -> EpisodeSource:
    """What the evaluation plays: the first ``episodes`` tasks of the server's test split (all of them if it holds
    fewer; the evaluation's episode i then plays task i modulo their number), else the dataset ``rows`` (held out from
    training or not, as ``rows_held_out`` says)."""
    catalog = task_catalog(url, timeout_s=timeout_s)
    split = catalog.test_split() if catalog is not None else None
    if catalog is not None and split is not None and split.tasks:
        indexes = list(range(min(episodes, split.tasks)))
        played = [task_row(get_task(url, catalog, split.name, i, timeout_s=timeout_s), split.name, i) for i in indexes]
        return EpisodeSource(played, FROM_TEST_SPLIT, split.name, indexes)
    return EpisodeSource(rows, FROM_HELD_OUT_ROWS if rows_held_out else FROM_TRAINING_ROWS)


def builtin_catalog(name: str) -> TaskCatalog:
    """The splits of the built-in environment ``name``, read here without starting its server."""
    from backend.environments.builtin.splits import SPLITS, builtin_splits

    splits = builtin_splits(name)
    return TaskCatalog(name, tuple(TaskSplit(split, split, len(splits.tasks(split))) for split in SPLITS))


def environment_catalog(reference: str, *, budget_s: float = 10.0) -> TaskCatalog | None:
    """The splits of the environment a spec names (``builtin:<name>``, a Space id or a URL), or None when it offers
    none. ValueError or EnvironmentUnavailable sentences for a name that is no environment or refused."""
    from backend.core.hub_names import BUILTIN_PREFIX
    from backend.environments.builtin.registry import builtin_environment
    from backend.environments.connection import resolve_url, time_budget

    if reference.startswith(BUILTIN_PREFIX):
        name = reference.removeprefix(BUILTIN_PREFIX)
        builtin_environment(name)  # KeyError naming the known ones
        return builtin_catalog(name)
    url = resolve_url(reference)
    with time_budget(budget_s):
        get_json(url, "/health", budget_s)  # a server that cannot be reached is a sentence, not "no splits"
        return task_catalog(url, timeout_s=budget_s)
