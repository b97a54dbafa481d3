"""The facade's datasets: uploads and their checks, the first row, the preview and the reward bench."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.api.common import name_of, whole_number
from backend.api.core import StudioCore, hub_token
from backend.api.guards import BENCH_CALLS, BENCH_TIME, UPLOAD_CHECKS, build
from backend.core.spec import JobSpec, Method, RewardSpec, SpecError
from backend.core.uploads import upload_display_name
from backend.core.users import User
from backend.data.upload_store import (
    SharedSources,
    StoredUpload,
    UploadQuota,
    UploadShelf,
    delete_stored_upload,
    stored_uploads,
    upload_quota,
)
from backend.data.uploads import CHECK_SECONDS
from backend.data.user_cache import cached_bytes
from backend.jobs.access import reward_model_problems
from backend.jobs.records import JobStatus
from backend.training.named_jobs import model_sources
from backend.training.reward_checks import bench_scores, machine_memory_budget, reward_model_hub_problems

if TYPE_CHECKING:
    from backend.training.preview import DatasetPreview

UPLOAD_CHECK_WAIT_S = CHECK_SECONDS  # as long as one check may run: behind stuck checks, a refusal after that


class DatasetOperations:
    """Datasets (``api.datasets``): uploads, previews and the reward bench, over the facade's core, with their own
    limits (the uploads' checks, quota and shared sources; the bench's rate and time)."""

    def __init__(self, core: StudioCore) -> None:
        self.core = core
        self._upload_checks = build(UPLOAD_CHECKS)  # each check may take over 2 GB: as many as the memory holds
        self._upload_quota = UploadQuota()
        self._upload_sources = SharedSources()
        # The reward bench runs code a user wrote: a few calls a minute each, off the request thread with a time limit.
        self._bench_calls = build(BENCH_CALLS)
        self._bench_time = build(BENCH_TIME)

    def close(self) -> None:
        """Stop the reward bench's pool (the facade is closing)."""
        self._bench_time.close()

    def upload_dataset(
        self,
        source: Path | str,
        original_name: str,
        method: str,
        user: User | None = None,
        columns: dict[str, str] | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> tuple[str, str]:
        """Keep an uploaded dataset file if it loads for ``method`` (with the Column mapping ``columns``):
        (upload id, summary). A readable file whose columns need a mapping is kept: UnmappedUpload says which.

        The spec names it as ``dataset: {source: upload, name: <upload id>}``; the id resolves only in the
        uploader's own folder. ``source`` is the web server's temporary copy: removed once no other request is
        checking it (identical uploads share one), so a kept file exists once (the studio's copy) and a refused one
        nowhere (the studio's copy and the check's datasets cache go too).

        A file that would take its owner past ``STUDIO_UPLOAD_QUOTA_MB`` is refused before anything is stored. One
        person's checks run two at a time and the Space's as many as its memory holds; a check over either limit
        waits its turn (``on_wait`` is told once, with the sentence to show) for up to ``UPLOAD_CHECK_WAIT_S``.
        """
        from backend.data.uploads import keep_upload

        release_source = self._upload_sources.hold(Path(source))
        try:
            self.core.require_user(user, "dataset upload")
            owner = name_of(user)
            uploads_dir = self.core.paths.uploads(owner)
            try:
                size = Path(source).stat().st_size
            except FileNotFoundError:
                raise SpecError(
                    [
                        f"dataset: {original_name} is no longer on the server (its temporary copy is gone); "
                        "upload it again"
                    ]
                ) from None
            release_quota = self._upload_quota.reserve(uploads_dir, size, original_name)
            try:
                release_slot = self._upload_checks.hold(owner, wait_s=UPLOAD_CHECK_WAIT_S, on_wait=on_wait)
                try:
                    return keep_upload(Path(source), original_name, Method(method), uploads_dir, columns)
                finally:
                    release_slot()
            finally:
                release_quota()
        finally:  # kept or refused, the studio's own copy (or nothing) is all that should remain
            release_source()

    def discard_upload_source(self, source: Path | str) -> None:
        """Remove the web server's temporary copy of an upload refused before ``upload_dataset`` saw it, unless
        another request is checking the same file."""
        self._upload_sources.hold(Path(source))()

    def list_uploads(self, user: User | None = None) -> UploadShelf:
        """The caller's own kept uploads (newest first), with the bytes they take (and their copies being read now)
        and the quota."""
        self.core.require_user(user, "dataset upload")
        uploads_dir = self.core.paths.uploads(name_of(user))
        return UploadShelf(stored_uploads(uploads_dir), upload_quota(), cached_bytes(uploads_dir))

    def delete_upload(self, upload_id: str, user: User | None = None) -> StoredUpload:
        """Delete one of the caller's own uploads (the id resolves only in their folder), unless a queued or running
        job of theirs reads it: what was deleted, or SpecError with the reason."""
        self.core.require_user(user, "dataset upload")
        owner = name_of(user)
        for job in self.core.store.list(owner=owner, statuses=[JobStatus.queued, JobStatus.running]):
            dataset = job.spec.dataset
            if (dataset.source == "upload" and dataset.name == upload_id) or upload_id in job.spec.benchmarks.tasks:
                raise SpecError(
                    [
                        f"dataset: {upload_display_name(upload_id)} is read by job {job.id}, which is "
                        f"{job.status.value}; cancel it or let it finish, then delete the upload"
                    ]
                )
        return delete_stored_upload(self.core.paths.uploads(owner), upload_id)

    def check_upload(
        self,
        upload_id: str,
        method: str,
        columns: dict[str, str] | None = None,
        user: User | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> str:
        """Check a kept upload again with another Column mapping or method: its summary, or SpecError (kept). It
        counts among the owner's checks at once as an upload does (``upload_dataset``)."""
        from backend.data.uploads import check_upload

        self.core.require_user(user, "dataset upload")
        owner = name_of(user)
        release_slot = self._upload_checks.hold(owner, wait_s=UPLOAD_CHECK_WAIT_S, on_wait=on_wait)
        try:
            # The id resolves only inside this user's own uploads folder (backend.jobs.access.upload_file).
            return check_upload(upload_id, Method(method), self.core.paths.uploads(owner), columns)
        finally:
            release_slot()

    def first_row(self, spec: JobSpec | dict[str, Any] | str, user: User | None = None) -> dict[str, Any]:
        """The first row of the job's dataset, every column kept (the reward bench scores against it)."""
        from backend.data.loading import load_training_dataset

        spec = self.core.prepare(spec, user=user)
        dataset, _ = load_training_dataset(
            spec.dataset, spec.method, keep_all=True, uploads_dir=self.core.uploads_of(spec)
        )
        return dict(dataset[0])

    def preview(self, spec: JobSpec | dict[str, Any] | str, rows: int = 3, user: User | None = None) -> DatasetPreview:
        """The first rows of the job's data rendered exactly as its trainer will see them, with token counts."""
        from backend.data.loading import load_training_dataset
        from backend.models.loading import load_tokenizer, resolve_model
        from backend.training.preview import preview_dataset

        whole_number(rows, "the number of preview rows", 1, 100)
        spec = self.core.prepare(spec, user=user)
        tokenizer = load_tokenizer(resolve_model(spec.model, self.core.paths.models), spec.model)
        data = load_training_dataset(spec.dataset, spec.method, uploads_dir=self.core.uploads_of(spec))
        return preview_dataset(spec, tokenizer, data, rows)

    def score_rewards(
        self,
        rewards: list[RewardSpec | dict[str, Any]],
        completions: list[str],
        row: dict[str, Any] | None = None,
        user: User | None = None,
    ) -> list[dict[str, Any]]:
        """The reward test bench: each reward's score for completions a user typed, before any training.

        Signed-in users only on a Space, ``BENCH_CALLS`` a minute per user, input capped (see
        ``backend.methods.rewards.bench.bench_input_problems``) and scored off the request thread within
        ``BENCH_TIME`` (backend/api/guards.py).
        Raises SpecError (RateLimited, TimedOut) with the sentence to show.
        """
        from backend.methods.rewards.bench import bench_input_problems, score_completions

        self.core.require_user(user, "reward bench")
        problems = bench_input_problems(rewards, completions, row)
        if problems:
            raise SpecError(problems)
        specs = [r if isinstance(r, RewardSpec) else RewardSpec.model_validate(r) for r in rewards]
        problems = reward_model_problems(specs, user)
        if problems:
            raise SpecError(problems)
        sources = model_sources(self.core.store, specs, user)  # a reward job: the user's own, finished
        if user is not None:
            self._bench_calls.check(user.name)
        if not sources:
            return self._bench_time.run(
                lambda: score_completions(specs, completions, row, None, self.core.paths.models)
            )
        # A reward model is loaded in a child with limits, never here: sized from the Hub's metadata first.
        problems = reward_model_hub_problems(specs, hub_token(user), machine_memory_budget())
        if problems:
            raise SpecError(problems)
        with self.core.model_check(user):
            return bench_scores(specs, completions, row, sources, self.core.paths.models, hub_token(user))
