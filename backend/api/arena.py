"""The facade's agent arena: a finished environment job's base and tuned models play the same episodes side by side
(backend/workflows/arena.py), kept per user so a pair can be opened again by its link."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from backend.api.chat import ChatOperations
from backend.api.common import SQLITE_MAX_INT, name_of, whole_number
from backend.api.core import StudioCore
from backend.api.guards import ARENA_CALLS, ARENA_PLAYS, build
from backend.api.jobs import JobOperations
from backend.core.spec import SpecError
from backend.core.users import User
from backend.jobs.lineage import saved_adapter
from backend.platform.limits import HeldStream

if TYPE_CHECKING:
    from backend.jobs.records import JobRecord
    from backend.workflows.arena import ArenaPlay, ArenaSetup, Sampling

ARENA_BASES = ("base", "parent")
ARENA_SAMPLING = ("greedy", "training")
FIRST_MESSAGE_MAX_CHARS = 4000
_MAX_ANCESTORS = 16
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


class ArenaOperations:
    """The arena (``api.arena``): over the facade's core, its jobs and its chat (whose loaded models it plays), with
    its own limits (like a dry run's, under its own name and setting)."""

    def __init__(self, core: StudioCore, jobs: JobOperations, chat: ChatOperations) -> None:
        self.core = core
        self.jobs = jobs
        self.chat = chat
        # The arena plays an environment with a model, as a dry run does: limits like a dry run's, in its own pool.
        self._calls = build(ARENA_CALLS)
        self._plays = build(ARENA_PLAYS)

    def setup(self, job_id: str, user: User | None = None) -> ArenaSetup:
        """What the arena plays for a job: the environment of the job or of the nearest job it continues, and the
        adapters. ArenaError (a sentence) when no job of its chain played an environment."""
        from backend.workflows.arena import ArenaError, ArenaSetup

        job = self.jobs.get_job(job_id, user)
        chain: list[JobRecord] = [job]
        while not chain[-1].spec.environment.name and chain[-1].spec.model.parent_job_id:
            if len(chain) > _MAX_ANCESTORS:
                break
            chain.append(self.jobs.get_job(chain[-1].spec.model.parent_job_id, user))
        with_environment = next((j for j in chain if j.spec.environment.name), None)
        if with_environment is None:
            raise ArenaError(
                f"job {job.id} did not play an environment (nor did a job it continues), so there is no game for the "
                "arena; pick a GRPO job trained with an environment"
            )
        parent_id = job.spec.model.parent_job_id
        parent_adapter = saved_adapter(self.jobs.get_job(parent_id, user)) if parent_id else None
        played = job.artifacts.environment_evaluation or {}
        split = played.get("split") if played.get("held_out") else None
        return ArenaSetup(job.id, with_environment.spec, with_environment.id, parent_adapter, parent_id, split)

    def play(
        self,
        job_id: str,
        user: User | None = None,
        *,
        episodes: int = 1,
        row: int = 0,
        base: str = "base",
        sampling: str = "greedy",
        seed: int | None = None,
        first_message: str | None = None,
        split: str | None = None,
    ) -> Iterator[ArenaPlay]:
        """Play ``episodes`` episodes per side (``row`` first; episode i plays row i of the job's evaluation rows with
        seed training.seed + i unless ``seed`` is given, or with ``split`` task i of the environment's split, e.g.
        its held-out ``test`` tasks), streamed as the play stands after each round of model turns; the last one is
        over, its pairs kept and numbered (``pair``). Raises a SpecError, ArenaError or ValueError sentence before
        anything plays."""
        from backend.workflows.arena import (
            ARENA_MAX_EPISODES,
            ArenaError,
            episode_rows,
            keep_pairs,
            play,
            split_tasks,
        )

        self.core.require_user(user, "the arena")
        whole_number(episodes, "the number of episodes", 1, ARENA_MAX_EPISODES)
        whole_number(row, "the arena's row", 0, SQLITE_MAX_INT)
        whole_number(seed, "the arena's seed", 0, 2**32 - 1, optional=True)
        if base not in ARENA_BASES:
            raise SpecError([f"the arena's left side is 'base' or 'parent', not {str(base)[:40]!r}"])
        if sampling not in ARENA_SAMPLING:
            raise SpecError([f"the arena plays 'greedy' or 'training' sampling, not {str(sampling)[:40]!r}"])
        if first_message is not None and not isinstance(first_message, str):
            raise SpecError(["the first message must be text"])
        first_message = (first_message or "").strip() or None
        if first_message and len(first_message) > FIRST_MESSAGE_MAX_CHARS:
            raise SpecError([f"the first message is longer than {FIRST_MESSAGE_MAX_CHARS:,} characters"])
        setup = self.setup(job_id, user)
        if base == "parent" and setup.parent_adapter is None:
            raise ArenaError(
                f"job {job_id} does not continue another job's adapter, so its left side can only be the base model"
            )
        if split is not None and (not isinstance(split, str) or not SPLIT_NAME.match(split)):
            raise SpecError([f"a split is named with letters, digits, '_', '-' or '.', not {str(split)[:40]!r}"])
        chat = self.chat.for_job(job_id, user)  # ValueError sentences: not succeeded, no adapter
        if split is not None:
            rows, tasks = [], split_tasks(setup.spec, split)
            if row + episodes > tasks:
                raise ArenaError(
                    f"the {split!r} split holds tasks 0 to {tasks - 1}: task {row + episodes - 1} is past its end"
                )
        else:
            rows = episode_rows(setup.spec, self.core.paths.uploads(setup.spec.owner))
            if not rows:
                raise ArenaError(f"job {setup.environment_job_id}'s dataset has no rows to start an episode from")
            if row >= len(rows):
                raise ArenaError(
                    f"row {row} is past the {len(rows)} rows the job's evaluation plays (0 to {len(rows) - 1})"
                )
        if user is not None:
            self._calls.check(user.name)
        owner = name_of(user)
        indices = list(range(row, row + episodes))

        def prepare() -> None:  # under the model's lock, before each round: the parent's adapter, once
            if base == "parent":
                from backend.training.evaluation import load_start_adapter

                load_start_adapter(chat.model, setup.parent_adapter)

        release = self._plays.hold(user.name) if user is not None else (lambda: None)

        def stream() -> Iterator[ArenaPlay]:
            for state in play(
                setup,
                chat.model,
                chat.tokenizer,
                chat.generating,
                rows,
                indices,
                base=base,
                sampling=cast("Sampling", sampling),  # checked against ARENA_SAMPLING above
                seed=seed,
                first_message=first_message,
                before_generate=prepare,
                split=split,
            ):
                if state.over:
                    keep_pairs(self.core.paths, owner, state)
                    # Free the user's play before the last update is read: the page shows it and the next click may
                    # come before the stream is asked for its end.
                    release()
                yield state

        return HeldStream(stream(), release)

    def pair(self, job_id: str, episode: int, user: User | None = None) -> dict[str, Any]:
        """A kept pair (its two episodes, tools, labels and settings), for its owner only: another user's job, or a
        number never played, is not found."""
        from backend.workflows.arena import kept_pair

        self.jobs.get_job(job_id, user)
        whole_number(episode, "the episode number", 1, 10**9)
        return kept_pair(self.core.paths, name_of(user), job_id, episode)

    def episodes(self, job_id: str, user: User | None = None) -> list[int]:
        """The numbers of the user's kept pairs of a job."""
        from backend.workflows.arena import kept_numbers

        self.jobs.get_job(job_id, user)
        return kept_numbers(self.core.paths, name_of(user), job_id)

    def prefer(self, job_id: str, episode: int, better: str, user: User | None = None) -> dict[str, Any]:
        """Keep a kept pair as a DPO row with its tools (the better side's whole episode chosen, the other rejected);
        one pick per pair, the last click wins. ValueError sentences: an unknown pair, the same play on both sides."""
        from backend.chat.feedback import feedback_log
        from backend.chat.side_by_side import chat_target
        from backend.models.loading import load_tokenizer

        pair = self.pair(job_id, episode, user)
        log = feedback_log(self.core.paths, name_of(user), "episodes")
        # The row is checked against the template the episodes were played with: the tokenizer the chat loads with
        # the job's adapter. Only the tokenizer: loading the model for it would also unload another user's chat.
        target = chat_target(self.jobs.get_job(job_id, user))  # ValueError sentences: no adapter any more
        template = load_tokenizer(str(target.adapter_dir), target.model).chat_template
        return log.record_episodes(
            pair["base"], pair["tuned"], pair.get("tools") or [], better, job_id, episode, chat_template=template
        )
