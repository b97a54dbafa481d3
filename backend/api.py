"""The backend facade: the one door of the UI and the CLI (submit, list, show, cancel, resume, metrics), and the
UI's whole vocabulary (types, enums, errors, catalogue), re-exported so ``components/`` imports nothing else."""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from backend.access import authorize_spec, readable_job
from backend.api_hub import HubOperations
from backend.artifacts import LearningVerdict, SignalWatch
from backend.catalogue import (
    CURATED_MODELS,
    DEFAULT_HF_JOB_FLAVOR,
    HF_JOB_FLAVORS,
    REWARDS,
    Monitoring,
    SpecField,
    builtin_dataset_choices,
    builtin_dataset_help,
    environment_choices,
    method_part,
    methods,
    monitoring,
    spec_field,
)
from backend.demo_model import (
    ARITH_MODEL_ID,
    DEMO_MODEL_ID,
    DEMO_MODEL_NOTE,
    demo_model_note,
    demo_recipe,
    is_demo_model,
)
from backend.failures import tail_lines
from backend.hardware import detect_device
from backend.hub_status import hub_status
from backend.learning import status_text
from backend.limits import HeldStream, InFlight, RateLimiter, TimedOut, TimeLimit, int_setting
from backend.lineage import Lineage, last_checkpoint, resolve_lineage
from backend.paths import DataPaths, safe_name, storage_problem
from backend.preflight import check_and_plan, check_spec
from backend.remote_registry import RemoteRegistry
from backend.scheduler import Scheduler, SchedulerHealth, spawn_detached
from backend.space_runtime import ZERO_GPU_REFUSAL, gpu_task, on_space, on_zero_gpu
from backend.spec import JobSpec, Method, RewardSpec, SpecError, load_spec_text, parse_spec
from backend.store import (
    RESUMABLE_STATUSES,
    InvalidTransition,
    JobNotFound,
    JobRecord,
    JobStatus,
    JobStore,
    StoreError,
)
from backend.users import User, hub_user, local_user, max_queued_per_user

if TYPE_CHECKING:
    from backend.chat import GenerationSettings
    from backend.environments.episodes import Episode
    from backend.feedback import FeedbackFormat, PreferenceLog, ThumbLog
    from backend.preview import DatasetPreview

# The UI's vocabulary: components/ import these from here and nothing from other backend modules (tests/test_facade.py).
__all__ = [
    "StudioAPI",
    "Submitted",
    "WarmUp",
    "MetricsPage",
    "SchedulerHealth",
    "JobSpec",
    "Method",
    "RewardSpec",
    "SpecError",
    "load_spec_text",
    "JobRecord",
    "JobStatus",
    "JobNotFound",
    "InvalidTransition",
    "StoreError",
    "User",
    "hub_user",
    "local_user",
    "on_space",
    "on_zero_gpu",
    "gpu_task",
    "ZERO_GPU_REFUSAL",
    "detect_device",
    "hub_status",
    "DEMO_MODEL_ID",
    "DEMO_MODEL_NOTE",
    "is_demo_model",
    "ARITH_MODEL_ID",
    "demo_model_note",
    "demo_recipe",
    "CURATED_MODELS",
    "HF_JOB_FLAVORS",
    "DEFAULT_HF_JOB_FLAVOR",
    "REWARDS",
    "SpecField",
    "spec_field",
    "methods",
    "method_part",
    "environment_choices",
    "builtin_dataset_choices",
    "builtin_dataset_help",
    "Monitoring",
    "monitoring",
    "status_text",
    "LearningVerdict",
    "SignalWatch",
]
# Re-exported on first use (PEP 562): these modules load torch, transformers, datasets or huggingface_hub, which
# the CLI and the scheduler should not pay for at start-up.
_LAZY_EXPORTS = {
    "GenerationSettings": "backend.mixed_batch",
    "message_text": "backend.chat",
    "UnmappedUpload": "backend.uploads",
    "PushError": "backend.publish",
    "RemoteJobError": "backend.hf_jobs",
    "live_figures": "backend.performance",
    "performance_line": "backend.performance",
}


def __getattr__(name: str) -> Any:
    """The lazily re-exported names of ``_LAZY_EXPORTS``, imported when the UI first asks for them."""
    if name in _LAZY_EXPORTS:
        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SQLITE_MAX_INT = 2**63 - 1
PARTIAL_ZIP = ".partial"  # an adapter zip being written, beside where it will be renamed to
# Space-wide limits (settings of the same names, STUDIO_...): see the README's security section.
DEFAULT_MAX_QUEUED_TOTAL = 30
DEFAULT_MAX_DRY_RUNS = 2
DEFAULT_MAX_CHAT_STREAMS = 8
DEFAULT_MAX_CHAT_STREAMS_PER_USER = 2


def _whole_number(value: Any, what: str, low: int, high: int, optional: bool = False) -> int | None:
    """``value`` when it is a whole number in ``low..high`` (or None where ``optional``); else SpecError with a
    sentence: a number from a browser or a script reaches the store, a file or a loop only in range."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "\u2026"
        raise SpecError([f"{what} must be a whole number from {low:,} to {high:,}, not {shown}"])
    return value


def _name_of(user: User | None) -> str:
    """The name a caller's jobs and files go under: no user (the CLI, tests) is "local", as JobSpec.owner defaults."""
    return user.name if user is not None else "local"


@dataclass(frozen=True)
class MetricsPage:
    """Metric rows logged after a cursor, and the cursor to ask with next time (unchanged when none are new)."""

    rows: list[dict[str, Any]]
    cursor: int


@dataclass(frozen=True)
class Submitted:
    """A job just queued: its row, its place in the queue, and warnings worth reading before it runs."""

    job: JobRecord
    queue_position: int | None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WarmUp:
    """A tool-use warm-up: the demonstrations written (summary, upload id), the SFT job and the GRPO job after it."""

    demonstrations: str
    upload_id: str
    sft: Submitted
    grpo: Submitted


SchedulerMode = Literal["thread", "detached", "none"]

# Actions that run code a user wrote (reward patterns) or a model and an environment (dry runs): signed-in users only,
# a few calls a minute each, off the request thread with a time limit.
BENCH_CALLS_PER_MINUTE = 20
BENCH_TIME_LIMIT_S = 10.0
DRY_RUNS_PER_MINUTE = 5
DRY_RUN_TIME_LIMIT_S = 300.0


class StudioAPI(HubOperations):
    """The facade over the store and a scheduler (its Hub operations are in backend/api_hub.py).

    ``scheduler`` says who runs the queue: ``"thread"`` runs one inside this process (the app), ``"detached"``
    starts a background scheduler process when none is running (the CLI and scripts), ``"none"`` leaves it to
    someone else (tests that start their own).
    """

    def __init__(
        self, data_dir: Path | str | None = None, scheduler: SchedulerMode = "detached", **scheduler_kwargs: Any
    ):
        self.paths = DataPaths(data_dir).ensure()
        self.store = JobStore(self.paths.db)
        self.remote = RemoteRegistry(self.store)
        with contextlib.suppress(OSError):  # tried again at the next start
            self.paths.move_user_folders(self.store.owners())
            self._sweep_half_files()
        self.mode = scheduler
        self.scheduler: Scheduler | None = None
        self._chat_models = None  # loaded on the first chat
        self._chat_lock = threading.Lock()
        # job id -> the submitting user's Hub token, for jobs that push when they finish: memory only.
        self._tokens: dict[str, str] = {}
        self._bench_calls = RateLimiter("reward bench", BENCH_CALLS_PER_MINUTE)
        self._bench_time = TimeLimit(
            "reward bench", BENCH_TIME_LIMIT_S, advice="use fewer or shorter completions, or simpler patterns"
        )
        self._dry_run_calls = RateLimiter("dry run", DRY_RUNS_PER_MINUTE)
        # Space-wide, beside the per-user limits: work one process can hold at once (settings read at start).
        self._dry_runs = InFlight(
            "dry run", 1, int_setting("STUDIO_MAX_DRY_RUNS", DEFAULT_MAX_DRY_RUNS), "STUDIO_MAX_DRY_RUNS"
        )
        self._chat_streams = InFlight(
            "chat",
            int_setting("STUDIO_MAX_CHAT_STREAMS_PER_USER", DEFAULT_MAX_CHAT_STREAMS_PER_USER),
            int_setting("STUDIO_MAX_CHAT_STREAMS", DEFAULT_MAX_CHAT_STREAMS),
            "STUDIO_MAX_CHAT_STREAMS",
        )
        self._dry_run_time = TimeLimit(
            "dry run",
            DRY_RUN_TIME_LIMIT_S,
            workers=1,
            advice="lower environment.max_tool_calling_iterations or "
            "grpo.max_completion_length, or try a smaller model",
        )
        if scheduler == "thread":
            self.scheduler = Scheduler(self.paths, secret_env=self._secret_env, **scheduler_kwargs).start()

    def _sweep_half_files(self) -> None:
        """What a killed process left half-written: staged uploads and partial adapter zips (never handed out)."""
        from backend.uploads import LEFTOVER_AGE_S, sweep_staging

        sweep_staging(self.paths.root / "uploads")
        for partial in self.paths.downloads.glob(f"*/{PARTIAL_ZIP}*"):
            if time.time() - partial.stat().st_mtime > LEFTOVER_AGE_S:  # not one another process is writing now
                shutil.rmtree(partial.parent, ignore_errors=True)

    def close(self) -> None:
        """Stop the scheduler this API started, and the pools behind the reward bench and dry runs."""
        if self.scheduler is not None:
            self.scheduler.stop()
        self._bench_time.close()
        self._dry_run_time.close()
        self.store.close()

    def storage_notice(self) -> str | None:
        """A sentence for the header when the data folder cannot be written (a read-only mount), else None."""
        if self.store.writable():
            return None
        return (
            f"The studio’s data folder ({self.paths.root}) is read-only: jobs, logs and adapters can be read, but "
            "nothing can be queued, cancelled, uploaded or saved until it is writable again."
        )

    def scheduler_health(self) -> SchedulerHealth | None:
        """The in-process scheduler's health for the header (alive, last error, failures in a row, jobs running);
        None when this process runs no scheduler (``detached``/``none`` modes: another process owns the queue)."""
        return self.scheduler.health() if self.scheduler is not None else None

    # --- jobs ----------------------------------------------------------------------------------------
    def _prepare(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> JobSpec:
        """The parsed spec, owned by ``user`` and holding only what they may read (backend/access.py), parent
        resolved. ``user=None`` is a trusted caller in this process (the CLI, tests)."""
        return self._prepare_lineage(spec, owner, user).spec

    def _prepare_lineage(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> Lineage:
        """:meth:`_prepare`, with the parent job read on the way (backend/lineage.py)."""
        if not isinstance(spec, JobSpec):
            spec = parse_spec(spec)
        if owner is not None and owner != spec.owner:
            spec = spec.model_copy(update={"owner": owner})
        spec = authorize_spec(spec, user, self.paths)
        return resolve_lineage(spec, self.store, user)

    def _uploads_of(self, spec: JobSpec) -> Path:
        return self.paths.uploads(spec.owner)

    def _require_user(self, user: User | None, what: str) -> None:
        """Actions that run user code or a model are for signed-in users; None is trusted only off a Space."""
        if user is None and on_space():
            raise SpecError([f"{what}: sign in with Hugging Face first (button at the top right)"])

    def submit(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> Submitted:
        """Validate, pre-flight and queue a job. Raises SpecError (nothing is queued) when it cannot run.

        With ``user`` the job is theirs, a parent job must be theirs too, and their queued jobs are capped
        (QuotaExceeded, unless they are an admin).
        """
        if on_zero_gpu():
            raise SpecError([f"spec: {ZERO_GPU_REFUSAL}"])
        if user is not None:
            owner = user.name
        spec = self._prepare(spec, owner, user)
        limited = user is not None and not user.is_admin
        queue_limit = max_queued_per_user() if limited else None
        total_limit = int_setting("STUDIO_MAX_QUEUED_TOTAL", DEFAULT_MAX_QUEUED_TOTAL) if limited else None
        if queue_limit is not None:
            self.store.check_queue_room(spec.owner, queue_limit, total_limit)  # answer before the slow pre-flight
        warnings = check_spec(spec, self.paths.models, self._uploads_of(spec))
        job = self.store.add(spec, max_queued_for_owner=queue_limit, max_queued_total=total_limit)
        if spec.output.push_to_hub and user is not None and user.token:
            self._tokens[job.id] = user.token
        if warnings:
            self.store.merge_artifacts(job.id, preflight_warnings=warnings)
        self._kick()
        return Submitted(job, self.store.queue_position(job.id), warnings)

    def check(self, spec: JobSpec | dict[str, Any] | str, user: User | None = None) -> tuple[list[str], str]:
        """Pre-flight without queueing: (warnings, the memory estimate and auto-tune's choices for this machine, as
        text). Raises SpecError like submit would."""
        spec = self._prepare(spec, user=user)
        warnings, tuning = check_and_plan(spec, self.paths.models, self._uploads_of(spec))
        estimate = tuning.estimate
        text = f"Estimated peak memory on {detect_device().describe()}: {estimate.describe()}"
        if estimate.advice:
            text += "\nTo need less: " + "; ".join(estimate.advice)
        return warnings, text + "\nAuto-tune on this machine:\n" + tuning.describe()

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
        from backend.spec import Method
        from backend.uploads import keep_upload

        try:
            self._require_user(user, "dataset upload")
            owner = _name_of(user)
            return keep_upload(Path(source), original_name, Method(method), self.paths.uploads(owner), columns)
        finally:  # kept or refused, the studio's own copy (or nothing) is all that should remain
            Path(source).unlink(missing_ok=True)

    def check_upload(
        self, upload_id: str, method: str, columns: dict[str, str] | None = None, user: User | None = None
    ) -> str:
        """Check a kept upload again with another Column mapping or method: its summary, or SpecError (kept)."""
        from backend.spec import Method
        from backend.uploads import check_upload

        self._require_user(user, "dataset upload")
        owner = _name_of(user)
        # The id resolves only inside this user's own uploads folder (backend.access.upload_file).
        return check_upload(upload_id, Method(method), self.paths.uploads(owner), columns)

    def first_row(self, spec: JobSpec | dict[str, Any] | str, user: User | None = None) -> dict[str, Any]:
        """The first row of the job's dataset, every column kept (the reward bench scores against it)."""
        from backend.data import load_training_dataset

        spec = self._prepare(spec, user=user)
        with tempfile.TemporaryDirectory(prefix="studio-row-") as cache_dir:
            dataset, _ = load_training_dataset(
                spec.dataset, spec.method, keep_all=True, uploads_dir=self._uploads_of(spec), cache_dir=Path(cache_dir)
            )
            return dict(dataset[0])

    def _secret_env(self, job_id: str) -> dict[str, str]:
        """What the scheduler adds to a worker's environment: the token of the user who asked it to push."""
        token = self._tokens.pop(job_id, None)
        return {"HF_TOKEN": token} if token else {}

    def _kick(self) -> None:
        """Make sure some scheduler will pick the queue up."""
        if self.scheduler is not None:
            self.scheduler.notify()
        elif self.mode == "detached" and not Scheduler.is_running(self.paths):
            spawn_detached(self.paths)

    def preview(self, spec: JobSpec | dict[str, Any] | str, rows: int = 3, user: User | None = None) -> DatasetPreview:
        """The first rows of the job's data rendered exactly as its trainer will see them, with token counts."""
        from backend.preview import preview_dataset
        from backend.training.models import load_tokenizer, resolve_model

        _whole_number(rows, "the number of preview rows", 1, 100)
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
        ``backend.rewards.bench_input_problems``) and scored off the request thread within ``BENCH_TIME_LIMIT_S``.
        Raises SpecError (RateLimited, TimedOut) with the sentence to show.
        """
        from backend.rewards import bench_input_problems, score_completions

        self._require_user(user, "reward bench")
        problems = bench_input_problems(rewards, completions, row)
        if problems:
            raise SpecError(problems)
        specs = [r if isinstance(r, RewardSpec) else RewardSpec.model_validate(r) for r in rewards]
        if user is not None:
            self._bench_calls.check(user.name)
        return self._bench_time.run(lambda: score_completions(specs, completions, row))

    def dry_run(
        self, spec: JobSpec | dict[str, Any] | str, row: int = 0, seed: int | None = None, user: User | None = None
    ) -> Episode:
        """One episode of the job's model (base, or its parent job's adapter) in its environment: the transcript
        (turns, tool calls, tool results) and the reward, before anything is queued."""
        from backend.environments.dryrun import dry_run

        self._require_user(user, "dry run")
        _whole_number(row, "the dry run's row", 0, SQLITE_MAX_INT)
        _whole_number(seed, "the dry run's seed", 0, 2**32 - 1, optional=True)
        lineage = self._prepare_lineage(spec, user=user)
        spec, adapter = lineage.spec, lineage.adapter()

        def play() -> Episode:
            return dry_run(spec, self.paths.models, adapter, row=row, seed=seed, uploads_dir=self._uploads_of(spec))

        if user is None:  # a trusted caller (the CLI) waits as long as its model needs
            return play()
        self._dry_run_calls.check(user.name)
        return self._held_run(self._dry_runs, user, play)

    def _held_run(self, limit: InFlight, user: User, action):
        """``action()`` off the request thread within the dry-run time limit, counted in ``limit`` until it really
        ends (a call that timed out but still runs stays counted; one that never started is released)."""
        release = limit.hold(user.name)
        started = threading.Event()

        def held():
            started.set()
            try:
                return action()
            finally:
                release()

        try:
            return self._dry_run_time.run(held)
        except TimedOut:
            if not started.is_set():
                release()
            raise

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
        from backend.data import load_training_dataset
        from backend.environments.runtime import open_environment
        from backend.environments.warmup import demonstrate, warmup_spec
        from backend.uploads import keep_upload

        self._require_user(user, "warm-up")
        _whole_number(rows, "the warm-up's rows", 1, 1000)
        if user is not None:
            self._dry_run_calls.check(user.name)  # it plays the environment up to rows x 4 times
        owner = user.name if user is not None else None
        spec = self._prepare(spec, owner, user)
        if spec.method != "grpo" or not spec.environment.name:
            raise SpecError(["environment.name: a warm-up is for a GRPO job with an environment; pick one first"])
        check_spec(spec, self.paths.models, self._uploads_of(spec))  # refuse before playing anything
        dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True, uploads_dir=self._uploads_of(spec))
        prompts = [dataset[i] for i in range(min(len(dataset), rows))]
        with open_environment(spec, sessions=1) as active:
            episode_env = active.factory()
            try:
                shown = demonstrate(episode_env, prompts, count=rows, seed=spec.training.seed)
            finally:
                episode_env._close()
        with tempfile.TemporaryDirectory(prefix="studio-warmup-") as tmp:
            path = Path(tmp) / f"warmup-{safe_name(spec.environment.name)[:40]}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in shown.rows))
            upload_id, _ = keep_upload(path, path.name, Method.sft, self._uploads_of(spec))
        sft = self.submit(warmup_spec(spec, upload_id, len(shown.rows), steps, learning_rate), owner, user)
        try:
            grpo = self.submit(
                spec.model_copy(update={"model": spec.model.model_copy(update={"parent_job_id": sft.job.id})}),
                owner,
                user,
            )
        except Exception:
            self.store.request_cancel(sft.job.id)  # never half a pair
            raise
        return WarmUp(shown.summary(), upload_id, sft, grpo)

    # --- side-by-side chat ----------------------------------------------------------------------------
    def chat_pair(
        self,
        job_id: str,
        base_history: list[dict],
        tuned_history: list[dict],
        message: str,
        settings: GenerationSettings | None = None,
        user: User | None = None,
    ):
        """Stream (base answer, tuned answer) so far for a finished job: one base model, adapter on for one side."""
        from backend.chat import ChatModels

        job = self.get_job(job_id, user)
        with self._chat_lock:
            if self._chat_models is None:
                self._chat_models = ChatModels(self.paths.models)
        chat = self._chat_models.for_job(job)
        if user is None:
            return chat.stream_pair(base_history, tuned_history, message, settings)
        return HeldStream(
            chat.stream_pair(base_history, tuned_history, message, settings), self._chat_streams.hold(user.name)
        )

    # Chat feedback (backend/feedback.py): "better" picks are DPO pairs, 👍/👎 on one answer are KTO rows.
    def preference_log(self, user: User | None = None) -> PreferenceLog:
        """Where a user's "this side is better" picks are kept (DPO rows)."""
        from backend.feedback import feedback_log

        return feedback_log(self.paths, _name_of(user), "dpo")

    def thumb_log(self, user: User | None = None) -> ThumbLog:
        """Where a user's 👍/👎 on single answers are kept (KTO rows)."""
        from backend.feedback import feedback_log

        return feedback_log(self.paths, _name_of(user), "kto")

    def export_preferences(self, user: User | None = None, format: FeedbackFormat = "dpo") -> Path:
        """The user's picks (``dpo``) or thumbs (``kto``) as ``<user>-<format>.jsonl`` in a fresh downloads folder
        (the only place the app serves files from); their earlier exports of it are removed. ValueError when empty."""
        from backend.feedback import export_feedback

        return export_feedback(self.paths, _name_of(user), format)

    def list_jobs(self, owner: str | None = None, user: User | None = None) -> list[JobRecord]:
        """Jobs, oldest first; a non-admin ``user`` gets only their own."""
        if user is not None and not user.is_admin:
            owner = user.name
        return self.store.list(owner=owner)

    def unreadable_jobs(self, user: User | None = None) -> list[tuple[str, str]]:
        """(job id, reason) of the rows ``list_jobs`` leaves out because they cannot be read, for a notice."""
        owner = user.name if user is not None and not user.is_admin else None
        return self.store.unreadable_rows(owner=owner)

    def get_job(self, job_id: str, user: User | None = None) -> JobRecord:
        """One job; another user's job is reported as not found (its existence is not theirs to know)."""
        return readable_job(self.store, job_id, user)

    def queue_position(self, job_id: str) -> int | None:
        """A job's place in the queue (1: next to start), or None when it is not queued."""
        return self.store.queue_position(job_id)

    def cancel(self, job_id: str, user: User | None = None) -> JobStatus:
        """Queued jobs are cancelled at once; running ones are asked to stop (then killed after a grace period)."""
        self.get_job(job_id, user)
        status = self.store.request_cancel(job_id)
        if status is JobStatus.running:
            self._kick()
        return status

    def resume_refusal(self, job: JobRecord) -> str | None:
        """Why ``job`` cannot be resumed, as a sentence for the UI; None when it can.

        Interrupted, cancelled and failed jobs resume from their last ``checkpoint-N`` folder. An interrupted job
        without one may start again from the beginning (as before); a cancelled or failed one needs a checkpoint.
        """
        if job.status not in RESUMABLE_STATUSES:
            if job.status is JobStatus.succeeded:
                return "This job finished; clone it to train again."
            return f"This job is {job.status.value}; only an interrupted, cancelled or failed job can be resumed."
        if job.status is JobStatus.interrupted or last_checkpoint(self.paths.job_output(job.id)) is not None:
            return None
        return (
            f"This job is {job.status.value} and saved no checkpoint before it stopped, so there is nothing to "
            "resume from; clone it to start again (a smaller training.save_steps saves checkpoints sooner)."
        )

    def resumable(self, job: JobRecord) -> bool:
        """Whether ``job`` can be resumed now (the Jobs tab enables its Resume button from this)."""
        return self.resume_refusal(job) is None

    def resume(self, job_id: str, user: User | None = None) -> JobRecord:
        """Queue an interrupted, cancelled or failed job again; it continues from its last checkpoint.

        Raises InvalidTransition with ``resume_refusal``'s sentence when it cannot.
        """
        refusal = self.resume_refusal(self.get_job(job_id, user))
        if refusal is not None:
            raise InvalidTransition(refusal)
        job = self.store.requeue_for_resume(job_id)
        self._kick()
        return job

    def trackio_dashboard(self, job_id: str, user: User | None = None) -> str | None:
        """For a job that logs to trackio (``output.trackio``), the command that opens trackio's dashboard of its
        owner's runs (the Jobs tab shows it); None for a job without trackio."""
        from backend.tracking import dashboard_command

        job = self.get_job(job_id, user)
        return dashboard_command(self.paths, job.owner) if job.spec.output.trackio else None

    def metrics(self, job_id: str, after_id: int = 0, user: User | None = None) -> list[dict[str, Any]]:
        """A job's logged metrics rows, those after ``after_id`` only (to poll without re-reading)."""
        _whole_number(after_id, "the metrics cursor", 0, SQLITE_MAX_INT)
        self.get_job(job_id, user)
        return self.store.metrics(job_id, after_id)

    def metrics_since(self, job_id: str, cursor: int = 0, user: User | None = None) -> MetricsPage:
        """Incremental metrics: the rows logged after ``cursor`` and the cursor for the next call (a live view
        keeps the rows it has and asks only for new ones)."""
        _whole_number(cursor, "the metrics cursor", 0, SQLITE_MAX_INT)
        rows = self.metrics(job_id, cursor, user)
        return MetricsPage(rows, rows[-1]["id"] if rows else cursor)

    def finished_jobs(self, user: User | None = None) -> list[JobRecord]:
        """The user's succeeded jobs that kept an adapter, newest first: what a chat or a next stage can start from."""
        return [
            job
            for job in reversed(self.list_jobs(user=user))
            if job.status is JobStatus.succeeded and job.artifacts.adapter_dir
        ]

    def adapter_archive(self, job_id: str, user: User | None = None) -> Path:
        """Zip a succeeded job's adapter into a fresh, unguessable ``downloads/<random>/`` path (the only folder the
        web server may serve) and return it; the file appears whole or not at all (written beside it, renamed).

        Raises JobNotFound for a job that is not the user's, ValueError with a sentence when it has no adapter.
        """
        job = self.get_job(job_id, user)
        adapter = job.artifacts.adapter_dir if job.status is JobStatus.succeeded else None
        if not adapter or not Path(adapter).is_dir():
            raise ValueError(f"job {job.id} has no saved adapter to download (only a succeeded job has one)")
        try:
            target = self.paths.new_download(f"adapter-{job.spec.output.run_name or job.id}.zip")
        except OSError as exc:
            raise ValueError(f"the adapter could not be zipped: {storage_problem(exc)}") from None
        try:
            partial = shutil.make_archive(str(target.parent / PARTIAL_ZIP), "zip", adapter)
            Path(partial).replace(target)
        except OSError as exc:
            shutil.rmtree(target.parent, ignore_errors=True)  # nothing half-written stays in downloads/
            raise ValueError(f"the adapter could not be zipped: {storage_problem(exc)}") from None
        return target

    def samples(self, job_id: str, user: User | None = None) -> list[dict[str, Any]]:
        """GRPO's kept completions with their rewards."""
        self.get_job(job_id, user)
        return self.store.samples(job_id)

    def log_tail(self, job_id: str, lines: int = 50, user: User | None = None) -> list[str]:
        """The last ``lines`` lines of a job's training log (1 to 10,000)."""
        _whole_number(lines, "the number of log lines", 1, 10_000)
        self.get_job(job_id, user)
        return tail_lines(self.paths.job_log(job_id), lines)
