"""The built-in environments' tasks, as OpenEnv's Task API serves them: a ``train`` and a ``test`` split each.

The splits are fixed (a seeded draw, the same on every machine) and disjoint, and no test task is a task of the
environment's shipped datasets: a job that trains on those rows, or on the train split, never meets a test task, so an
evaluation on the test split plays tasks the job never trained on. Each task is the arguments ``reset`` takes (``a``,
``op``, ``b``; ``target``; ``word``) with the prompt that poses it, phrased as the shipped datasets phrase theirs.

Only the standard library and the shipped files are read here: the catalogue (``backend.api``) lists the splits
without starting a server.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from backend.core.paths import ASSETS_DIR, BUILTIN_DATASETS_DIR

SPLITS = ("train", "test")
SPLIT_SEED = 20261206  # the draw that picks each environment's test tasks
WORDS_PATH = ASSETS_DIR / "wordle_words.txt"

# Echo's texts: the first twelve are what a seeded reset picks from (and what echo-demo asks for).
TARGETS = (
    "hello world",
    "blue sky",
    "open the door",
    "seven green apples",
    "rain in the morning",
    "a cup of tea",
    "the quick brown fox",
    "good night",
    "paper boat",
    "fast trains",
    "silver moon",
    "count to ten",
)
MORE_TARGETS = (
    "red kite",
    "a quiet street",
    "warm bread",
    "three little birds",
    "snow on the hill",
    "turn left here",
    "a long letter",
    "bright stars tonight",
    "the old clock",
    "green tea please",
    "an open window",
    "five small stones",
)
ARITH_OPERANDS = range(50)  # sums and differences of 0..49, as the arithmetic model and datasets pose them
ARITH_PHRASINGS = (
    "What is {a} {op} {b}? Submit the answer with the submit_answer tool.",
    "Compute {a} {op} {b} and give the result using submit_answer.",
)
ECHO_PROMPT = "Use the echo_message tool to echo this text exactly: {target}"
WORDLE_PROMPT = (
    "Let's play Wordle. Find the secret 5-letter word with the guess tool. Each letter gets a code: G right spot, "
    "Y wrong spot, X not in the word. You have 6 guesses."
)


@cache
def word_list() -> tuple[str, ...]:
    """The secret words (lowercase, five letters) shipped in ``backend/assets/wordle_words.txt``."""
    words = tuple(line.strip() for line in WORDS_PATH.read_text(encoding="utf-8").splitlines() if line.strip())
    if not words:
        raise RuntimeError(f"the Wordle word list {WORDS_PATH} is empty")
    return words


@dataclass(frozen=True)
class TaskSplits:
    """One environment's tasks by split: each task the ``reset`` arguments that pose it, with its ``prompt``."""

    train: tuple[dict[str, Any], ...]
    test: tuple[dict[str, Any], ...]

    def tasks(self, split: str) -> tuple[dict[str, Any], ...]:
        """The tasks of ``split``; ValueError naming the splits for any other name."""
        if split not in SPLITS:
            raise ValueError(f"no split {split!r}; the splits are: {', '.join(SPLITS)}")
        return self.train if split == "train" else self.test

    def task(self, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split``; IndexError (the Task API's 400) when there is none."""
        tasks = self.tasks(split)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tasks):
            raise IndexError(f"the {split} split has tasks 0 to {len(tasks) - 1}, not {index!r}")
        return tasks[index]


def split_pool(pool: Sequence[Hashable], shipped: Iterable[Hashable], test_size: int, seed: int = SPLIT_SEED):
    """(train, test) of ``pool``: ``test_size`` items drawn with ``seed`` from those not ``shipped``, and the rest in
    the pool's order.

    >>> split_pool(range(10), {0, 1, 2}, 3) == split_pool(range(10), {0, 1, 2}, 3)
    True
    >>> train, test = split_pool(range(10), {0, 1, 2}, 3)
    >>> sorted(train + test) == list(range(10)), set(test) & {0, 1, 2}
    (True, set())
    """
    shipped = set(shipped)
    candidates = [item for item in pool if item not in shipped]
    if len(candidates) < test_size:
        raise ValueError(f"only {len(candidates)} tasks can be held out, not {test_size}")
    test = random.Random(seed).sample(candidates, test_size)
    held = set(test)
    return [item for item in pool if item not in held], test


def shipped_values(datasets: Sequence[str], read: Callable[[dict[str, Any]], Hashable | None]) -> set[Hashable]:
    """What ``read`` finds in each row of the shipped ``datasets`` (a row where it finds nothing adds nothing)."""
    found: set[Hashable] = set()
    for name in datasets:
        for line in (BUILTIN_DATASETS_DIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            value = read(json.loads(line)) if line.strip() else None
            if value is not None:
                found.add(value)
    return found


def _parted(tasks: Iterable[dict[str, Any]], train: int) -> TaskSplits:
    """The tasks, the first ``train`` of them the train split and the rest the test split."""
    listed = tuple(tasks)
    return TaskSplits(listed[:train], listed[train:])


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@cache
def arithmetic_splits() -> TaskSplits:
    """200 test sums and differences no arithmetic dataset of the studio asks; the other ones of 0..49 to train on."""
    pool = [(a, op, b) for op in ("+", "-") for a in ARITH_OPERANDS for b in ARITH_OPERANDS]
    shipped = shipped_values(("arith-env", "arithmetic-demo"), lambda row: (row.get("a"), row.get("op"), row.get("b")))
    train, test = split_pool(pool, shipped, 200)

    def task(i: int, problem: Any) -> dict[str, Any]:
        a, op, b = problem
        return {
            "prompt": _user(ARITH_PHRASINGS[i % len(ARITH_PHRASINGS)].format(a=a, op=op, b=b)),
            "a": a,
            "op": op,
            "b": b,
        }

    return TaskSplits(tuple(task(i, p) for i, p in enumerate(train)), tuple(task(i, p) for i, p in enumerate(test)))


@cache
def echo_splits() -> TaskSplits:
    """8 test texts echo-demo never asks for; the other texts to train on."""
    train, test = split_pool(TARGETS + MORE_TARGETS, shipped_values(("echo-demo",), lambda row: row.get("target")), 8)
    return TaskSplits(
        *(tuple({"prompt": _user(ECHO_PROMPT.format(target=t)), "target": t} for t in part) for part in (train, test))
    )


@cache
def wordle_splits() -> TaskSplits:
    """40 test words wordle-demo never hides; the other words of the list to train on."""
    train, test = split_pool(word_list(), shipped_values(("wordle-demo",), lambda row: row.get("word")), 40)
    return _parted(({"prompt": _user(WORDLE_PROMPT), "word": w} for w in train + test), len(train))


BUILTIN_SPLITS: dict[str, Callable[[], TaskSplits]] = {
    "arithmetic": arithmetic_splits,
    "echo": echo_splits,
    "wordle": wordle_splits,
}


def builtin_splits(name: str) -> TaskSplits:
    """The splits of the built-in environment ``name``."""
    return BUILTIN_SPLITS[name]()


def reset_arguments(task: dict[str, Any]) -> dict[str, Any]:
    """What ``reset`` takes from a task: everything but its prompt."""
    return {key: value for key, value in task.items() if key != "prompt"}
