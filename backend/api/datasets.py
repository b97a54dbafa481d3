"""The facade's datasets: uploads and their checks, the first row, the preview and the reward bench."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.api.common import name_of, whole_number
from backend.core.spec import JobSpec, Method, RewardSpec, SpecError
from backend.core.users import User

if TYPE_CHECKING:
    from backend.training.preview import DatasetPreview


class DatasetOperations:
    """Datasets: for ``StudioAPI`` (it uses ``paths``, ``_prepare``, ``_require_user`` and the bench's limits)."""

    def upload_dataset(
        self,
        source: Path | str,
        original_name: str,
        method: str,
        user: User | None = None,
        columns: dict[str, str] | None = None,
    ) -> tuple[str, str]:
        """Keep an uploaded dataset file if it loads for ``method`` (with the Column mapping ``columns``):
        (upload id, summary). A readable file whose columns need a mapping is kept: UnmappedUpload says which.

        The spec names it as ``dataset: {source: upload, name: <upload id>}``; the id resolves only in the
        uploader's own folder. ``source`` is the web server's temporary copy: always removed, so a kept file exists
        once (the studio's copy) and a refused one nowhere (the studio's copy and the check's datasets cache go too).
        """
        from backend.data.uploads import keep_upload

        try:
            self._require_user(user, "dataset upload")
            owner = name_of(user)
            return keep_upload(Path(source), original_name, Method(method), self.paths.uploads(owner), columns)
        finally:  # kept or refused, the studio's own copy (or nothing) is all that should remain
            Path(source).unlink(missing_ok=True)

    def check_upload(
        self, upload_id: str, method: str, columns: dict[str, str] | None = None, user: User | None = None
    ) -> str:
        """Check a kept upload again with another Column mapping or method: its summary, or SpecError (kept)."""
        from backend.data.uploads import check_upload

        self._require_user(user, "dataset upload")
        owner = name_of(user)
        # The id resolves only inside this user's own uploads folder (backend.jobs.access.upload_file).
        return check_upload(upload_id, Method(method), self.paths.uploads(owner), columns)

    def first_row(self, spec: JobSpec | dict[str, Any] | str, user: User | None = None) -> dict[str, Any]:
        """The first row of the job's dataset, every column kept (the reward bench scores against it)."""
        from backend.data.loading import load_training_dataset

        spec = self._prepare(spec, user=user)
        with tempfile.TemporaryDirectory(prefix="studio-row-") as cache_dir:
            dataset, _ = load_training_dataset(
                spec.dataset, spec.method, keep_all=True, uploads_dir=self._uploads_of(spec), cache_dir=Path(cache_dir)
            )
            return dict(dataset[0])

    def preview(self, spec: JobSpec | dict[str, Any] | str, rows: int = 3, user: User | None = None) -> DatasetPreview:
        """The first rows of the job's data rendered exactly as its trainer will see them, with token counts."""
        from backend.models.loading import load_tokenizer, resolve_model
        from backend.training.preview import preview_dataset

        whole_number(rows, "the number of preview rows", 1, 100)
        spec = self._prepare(spec, user=user)
        tokenizer = load_tokenizer(resolve_model(spec.model, self.paths.models), spec.model)
        return preview_dataset(spec, tokenizer, rows, uploads_dir=self._uploads_of(spec))

    def score_rewards(
        self,
        rewards: list[RewardSpec | dict[str, Any]],
        completions: list[str],
        row: dict[str, Any] | None = None,
        user: User | None = None,
    ) -> list[dict[str, Any]]:
        """The reward test bench: each reward's score for completions a user typed, before any training.

        Signed-in users only on a Space, ``BENCH_CALLS_PER_MINUTE`` per user, input capped (see
        ``backend.methods.rewards.bench_input_problems``) and scored off the request thread within
        ``BENCH_TIME_LIMIT_S``.
        Raises SpecError (RateLimited, TimedOut) with the sentence to show.
        """
        from backend.methods.rewards import bench_input_problems, score_completions

        self._require_user(user, "reward bench")
        problems = bench_input_problems(rewards, completions, row)
        if problems:
            raise SpecError(problems)
        specs = [r if isinstance(r, RewardSpec) else RewardSpec.model_validate(r) for r in rewards]
        if user is not None:
            self._bench_calls.check(user.name)
        return self._bench_time.run(lambda: score_completions(specs, completions, row))
