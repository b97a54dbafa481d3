"""An export job in the worker: a finished job's model written out as its spec's ``export`` part asks (merged,
GGUF or the adapter zip), offered as one download and pushed, with progress, cancel and a log like any job.

Exports are jobs of their own kind in the same queue (``JobSpec.export``; the facade's ``ExportOperations.submit``
queues them, one per user at once). The scheduler runs them in their own lane, on the CPU, beside training
(``STUDIO_MAX_EXPORTS`` at once), so an export never waits behind a training job and a training job's GPU is never
at stake. Everything an export writes goes under a temporary name first and is renamed into place whole, so a
killed export leaves the previous one where it was; each job keeps one export and one download per format.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from backend.core.artifacts import ExportOutcome, GgufExport
from backend.core.paths import DataPaths, folder_bytes
from backend.core.spec import ExportSpec
from backend.jobs.lineage import saved_adapter
from backend.jobs.records import JobRecord
from backend.jobs.reporter import JobReporter
from backend.workflows.archive import zip_adapter

log = logging.getLogger("studio.export")

MERGED_FOLDER = "merged"  # a job's merged export: jobs/<id>/merged
GGUF_FOLDER = "gguf"  # its GGUF export (the file, its Modelfile and card): jobs/<id>/gguf


class ExportCancelled(Exception):
    """A cancel request (or the scheduler's SIGTERM) reached an export between two of its phases."""


def phases(spec: ExportSpec) -> list[str]:
    """The phases an export goes through, in order, as its progress names them.

    >>> phases(ExportSpec(job_id="j", format="gguf", push=True))
    ['merging', 'converting', 'checking', 'packing', 'uploading']
    >>> phases(ExportSpec(job_id="j", format="adapter"))
    ['packing']
    """
    steps = {"merged": ["merging"], "gguf": ["merging", "converting", "checking"], "adapter": []}[spec.format]
    return steps + (["packing"] if spec.download else []) + (["uploading"] if spec.push else [])


class Progress:
    """An export's progress row (phase i of n) and its cancel check, between phases."""

    def __init__(self, store: JobReporter, job_id: str, steps: list[str], stop_event: threading.Event):
        self.store, self.job_id, self.steps, self.stop_event = store, job_id, steps, stop_event
        self.seconds: dict[str, float] = {}
        self._phase: str | None = None
        self._started = time.monotonic()

    def __call__(self, phase: str) -> None:
        """Enter ``phase``: the last one's time kept, cancel checked, the row written."""
        self._close()
        if self.stop_event.is_set() or self.store.cancel_requested(self.job_id):
            raise ExportCancelled(f"stopped by request before {phase}")
        done = self.steps.index(phase) if phase in self.steps else len(self.seconds)
        self._phase, self._started = phase, time.monotonic()
        log.info("%s (%d/%d)", phase, done + 1, len(self.steps))
        total = max(len(self.steps), 1)
        self.store.report(
            self.job_id, [], {"step": done, "total_steps": total, "phase": phase, "updated_at": time.time()}
        )

    def _close(self) -> None:
        if self._phase is not None:
            self.seconds[self._phase] = round(time.monotonic() - self._started, 2)
            self._phase = None

    def finished(self) -> dict[str, float]:
        """Every phase done (the row says n of n); the seconds each phase took."""
        self._close()
        total = max(len(self.steps), 1)
        self.store.report(
            self.job_id, [], {"step": total, "total_steps": total, "phase": None, "updated_at": time.time()}
        )
        return dict(self.seconds)


def run_export_job(job: JobRecord, paths: DataPaths, store: JobReporter, stop_event: threading.Event) -> ExportOutcome:
    """Run the export ``job`` describes; its outcome (also recorded on it). ExportError (a sentence) when it fails,
    ExportCancelled when stopped between phases; what it wrote half is gone either way."""
    from backend.workflows.export import ExportError

    spec = job.spec.export
    assert spec is not None  # the worker sends only export jobs here
    source = store.get(spec.job_id)
    progress = Progress(store, job.id, phases(spec), stop_event)
    sweep_partials(paths.job_dir(source.id))
    paths.sweep_downloads()
    if spec.format == "adapter":
        folder = saved_adapter(source)
        if folder is None:
            raise ExportError(f"job {source.id} has no saved adapter to export (only a succeeded job has one)")
        outcome = ExportOutcome(job_id=source.id, format="adapter", path=str(folder), bytes=folder_bytes(folder))
        outcome.sentence = f"Job {source.id}'s adapter ({folder_bytes(folder) / 2**20:.1f} MiB)."
    else:
        outcome = _merged_or_gguf(source, spec, paths, store, progress)
    if spec.download:
        progress("packing")
        outcome = _packed(outcome, source, paths, store)
    if spec.push:
        progress("uploading")
        outcome = _pushed(outcome, source, spec, paths, store)
    outcome.seconds = progress.finished()
    return outcome


def _merged_or_gguf(
    source: JobRecord, spec: ExportSpec, paths: DataPaths, store: JobReporter, progress: Callable[[str], None]
) -> ExportOutcome:
    from backend.workflows.export import merge_job

    own = paths.job_dir(source.id) / MERGED_FOLDER
    out = Path(spec.out) if spec.out and spec.format == "merged" else own
    progress("merging")
    merged = merge_job(source, paths, out, replace=out == own)
    store.merge_artifacts(source.id, merged=merged.record())
    if spec.format == "merged":
        return ExportOutcome(
            job_id=source.id, format="merged", path=str(merged.path), bytes=folder_bytes(merged.path),
            sentence=merged.sentence,
        )  # fmt: skip
    from backend.workflows.gguf import export_gguf, sweep_partials

    folder = Path(spec.out) if spec.out else paths.job_dir(source.id) / GGUF_FOLDER
    sweep_partials(folder)  # what a killed export of this job left
    record = export_gguf(store.get(source.id), paths, merged.path, folder, spec.gguf_type, progress)
    store.merge_artifacts(source.id, gguf=record)
    return ExportOutcome(
        job_id=source.id, format="gguf", path=record.path, bytes=record.bytes, sentence=gguf_sentence(source, record)
    )


def gguf_sentence(source: JobRecord, record: GgufExport) -> str:
    """What a GGUF export says: the file, its type and size, and the quant check's figures."""
    said = f"Wrote {Path(record.path).name} ({record.gguf_type}, {record.bytes / 2**20:.1f} MiB) from job {source.id}."
    check = record.quant_check
    if check is not None and check.sentence:
        said += f" {check.sentence}"
    return said


def _packed(outcome: ExportOutcome, source: JobRecord, paths: DataPaths, store: JobReporter) -> ExportOutcome:
    """The export as one download (a zip of a folder; a GGUF file as itself, linked), replacing the job's last
    download of this format."""
    from backend.workflows.export import ExportError

    name = source.spec.output.run_name or source.id
    path = Path(outcome.path)
    try:
        if path.is_file():
            target = paths.new_download(path.name)
            try:
                os.link(path, target)  # the same bytes on disk, no copy
            except OSError:
                shutil.copyfile(path, target)
        else:
            target = zip_adapter(paths, path, f"{outcome.format}-{name}.zip", f"{outcome.format} export")
    except (OSError, ValueError) as exc:
        raise ExportError(str(exc)) from None
    downloads = dict(store.get(source.id).artifacts.downloads or {})
    old = downloads.get(outcome.format)
    downloads[outcome.format] = str(target)
    store.merge_artifacts(source.id, downloads=downloads)
    if old and Path(old).parent != target.parent and Path(old).parent.parent == paths.downloads:
        shutil.rmtree(Path(old).parent, ignore_errors=True)  # one download per format: the last one goes
    size = target.stat().st_size
    return outcome.model_copy(
        update={"download": str(target), "sentence": f"{outcome.sentence} Download ready ({size / 2**20:.1f} MiB)."}
    )


def _pushed(
    outcome: ExportOutcome, source: JobRecord, spec: ExportSpec, paths: DataPaths, store: JobReporter
) -> ExportOutcome:
    """The export pushed with the token the scheduler handed this worker, and the repo recorded on the job's merged
    or GGUF export (the snippets and cards name it); a failed push is said, the export kept."""
    from backend.hub.publish import PushError, push_gguf, push_job, push_merged
    from backend.jobs.store import JobStore

    token = os.environ.get("HF_TOKEN")
    repo = spec.repo_id or None
    fresh = store.get(source.id)  # with the merged or GGUF record this export wrote
    merged, gguf = fresh.artifacts.merged, fresh.artifacts.gguf
    try:
        if spec.format == "adapter":  # an adapter push reads the job's metrics too: the whole store
            pushed = push_job(fresh, paths, JobStore(paths.db), token, repo_id=repo, private=spec.private)
        elif spec.format == "merged":
            dtype, dequantized = (merged.dtype, merged.dequantized) if merged is not None else ("float32", False)
            pushed = push_merged(
                fresh, Path(outcome.path), token, dtype=dtype, dequantized=dequantized, repo_id=repo,
                private=spec.private,
            )  # fmt: skip
        else:
            pushed = push_gguf(fresh, Path(outcome.path).parent, token, repo_id=repo, private=spec.private)
    except PushError as exc:
        return outcome.model_copy(update={"push_error": str(exc), "sentence": f"{outcome.sentence} Not pushed: {exc}."})
    pushed_to = {"repo_id": pushed.repo_id, "url": pushed.url}
    if spec.format == "gguf" and gguf is not None:
        store.merge_artifacts(source.id, gguf=gguf.model_copy(update=pushed_to))
    if spec.format == "merged" and merged is not None:
        store.merge_artifacts(source.id, merged=merged.model_copy(update=pushed_to))
    return outcome.model_copy(update={**pushed_to, "sentence": f"{outcome.sentence} Pushed to {pushed.repo_id}."})


def sweep_partials(folder: Path) -> None:
    """Remove what a killed export left half-written in a job's folder (never a finished export)."""
    from backend.workflows.archive import PARTIAL_MERGED

    for partial in folder.glob(f"{PARTIAL_MERGED}*") if folder.is_dir() else ():
        shutil.rmtree(partial, ignore_errors=True)
