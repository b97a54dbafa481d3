"""The facade's environments: a dry run (one episode before queueing) and the tool-use warm-up."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from backend.api.common import SQLITE_MAX_INT, WarmUp, whole_number
from backend.api.core import StudioCore, hub_token
from backend.api.guards import DRY_RUN_CALLS, DRY_RUN_TIME, DRY_RUNS, SPLIT_CALLS, build
from backend.api.jobs import JobOperations
from backend.core.spec import JobSpec, SpecError
from backend.core.users import User
from backend.platform.limits import InFlight, held_run

if TYPE_CHECKING:
    from backend.environments.episodes import Episode
    from backend.environments.tasks import TaskCatalog

T = TypeVar("T")


class EnvironmentOperations:
    """Environments (``api.environments``): dry runs and warm-ups, over the facade's core and its jobs (a warm-up
    queues two), with the dry runs' own limits."""

    def __init__(self, core: StudioCore, jobs: JobOperations) -> None:
        self.core = core
        self.jobs = jobs
        self._dry_run_calls = build(DRY_RUN_CALLS)
        self._split_calls = build(SPLIT_CALLS)  # the Train form asks each time the environment field changes
        # Space-wide, beside the per-user limits: work one process can hold at once (settings read at start).
        self._dry_runs = build(DRY_RUNS)
        self._dry_run_time = build(DRY_RUN_TIME)  # a thread per dry run let in: a slow server holds only its own

    def close(self) -> None:
        """Stop the dry runs' pool (the facade is closing)."""
        self._dry_run_time.close()

    def dry_run(
        self, spec: JobSpec | dict[str, Any] | str, row: int = 0, seed: int | None = None, user: User | None = None
    ) -> Episode:
        """One episode of the job's model (base, or its parent job's adapter) in its environment: the transcript
        (turns, tool calls, tool results) and the reward, before anything is queued."""
        from backend.workflows.dryrun import dry_run

        self.core.require_user(user, "dry run")
        whole_number(row, "the dry run's row", 0, SQLITE_MAX_INT)
        whole_number(seed, "the dry run's seed", 0, 2**32 - 1, optional=True)
        named = self.core.named(spec, user=user)
        spec, adapter = named.spec, named.adapter()

        def play() -> Episode:
            return dry_run(
                spec, self.core.paths.models, adapter, row=row, seed=seed, uploads_dir=self.core.uploads_of(spec)
            )

        if user is None:  # a trusted caller (the CLI) waits as long as its model needs
            return play()
        self._dry_run_calls.check(user.name)
        return self._held_run(self._dry_runs, user, play)

    def splits(self, name: str, user: User | None = None) -> TaskCatalog | None:
        """The task splits the environment ``name`` offers through OpenEnv's Task API (``builtin:<name>``, a Space id
        or a URL), e.g. a ``test`` split a job's evaluation then plays; None when it offers none. A name that is no
        environment, or a server that cannot be reached, is a SpecError sentence."""
        from backend.environments.connection import EnvironmentUnavailable
        from backend.environments.runtime import INTERACTIVE_BUDGET_S
        from backend.environments.tasks import environment_catalog

        if not isinstance(name, str) or not name.strip():
            return None
        if user is not None:
            self._split_calls.check(user.name)
        try:
            return environment_catalog(name.strip(), budget_s=INTERACTIVE_BUDGET_S)
        except KeyError as exc:
            raise SpecError([f"environment.name: {exc.args[0]}"]) from None
        except (ValueError, EnvironmentUnavailable) as exc:
            raise SpecError([f"environment.name: {exc}"]) from None

    def _held_run(self, limit: InFlight, user: User, action: Callable[[], T]) -> T:
        """``action()`` off the request thread within the dry-run time limit, counted in ``limit`` (``held_run``)."""
        return held_run(limit, self._dry_run_time, user.name, action)

    def warm_up(
        self,
        spec: JobSpec | dict[str, Any] | str,
        user: User | None = None,
        *,
        rows: int = 32,
        steps: int | None = None,
        learning_rate: float | None = None,
    ) -> WarmUp:
        """Tool-use warm-up for a GRPO environment job: write SFT demonstrations by playing the environment itself
        (backend/environments/warmup.py), keep them as the user's upload, and queue SFT on them, then the GRPO job
        from that adapter (it waits for the SFT in the queue). Raises SpecError (nothing queued, nothing kept) when
        either job could not run."""
        from backend.environments.warmup import demonstrations_to_play, warmup_spec
        from backend.workflows.warmup import after, write_demonstrations

        self.core.require_user(user, "warm-up")
        whole_number(rows, "the warm-up's rows", 1, 1000)
        if user is not None:
            self._dry_run_calls.check(user.name)  # it plays the environment up to rows x 4 times
        owner = user.name if user is not None else None
        named = self.core.named(spec, owner, user)
        spec = named.spec
        if not spec.environment.name:  # the spec ties an environment to a method that plays one
            raise SpecError(["environment.name: a warm-up is for a GRPO job with an environment; pick one first"])
        with self.core.prepared(named, hub_token(user)):  # refuse before playing anything
            pass
        shown = write_demonstrations(spec, self.core.uploads_of(spec), demonstrations_to_play(rows))
        sft = self.jobs.submit(warmup_spec(spec, shown.upload_id, shown.rows, steps, learning_rate), owner, user)
        try:
            grpo = self.jobs.submit(after(spec, sft.job.id), owner, user)
        except Exception:
            self.core.store.request_cancel(sft.job.id)  # never half a pair
            raise
        return WarmUp(shown.summary, shown.upload_id, sft, grpo)
