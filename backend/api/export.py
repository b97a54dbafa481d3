"""The facade's exports: a finished job's merged model, into a folder and optionally to the Hub, and its snippets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from backend.api.core import StudioCore
from backend.api.jobs import JobOperations
from backend.core.users import User
from backend.jobs.access import may_name_server_paths, server_paths_hidden
from backend.jobs.store_errors import JobNotFound
from backend.platform.limits import InFlight, int_setting

if TYPE_CHECKING:
    from backend.hub.snippets import UseSnippet
    from backend.workflows.export import ExportResult

MERGED_FOLDER = "merged"  # the UI's export goes into the job's own folder: jobs/<id>/merged
DEFAULT_MAX_EXPORTS = 1  # a merge holds a whole model in memory: one at a time on a Space


def export_slots() -> InFlight:
    """The in-flight limit of merged exports (one per user, ``STUDIO_MAX_EXPORTS`` at once), one per facade."""
    return InFlight("merged export", 1, int_setting("STUDIO_MAX_EXPORTS", DEFAULT_MAX_EXPORTS), "STUDIO_MAX_EXPORTS")


class ExportOperations:
    """Exports (``api.export``), over the facade's core and its jobs, with their own limit (export_slots())."""

    def __init__(self, core: StudioCore, jobs: JobOperations) -> None:
        self.core = core
        self.jobs = jobs
        self._exports = export_slots()  # merged exports: each holds a whole model in memory

    def merged_folder(self, job_id: str) -> Path:
        """Where the UI puts a job's merged export: a folder of its own under the data dir."""
        return self.core.paths.job_dir(job_id) / MERGED_FOLDER

    def export_merged(
        self,
        job_id: str,
        user: User | None = None,
        out: Path | str | None = None,
        push_repo: str | None = None,
        private: bool = True,
        token: str | None = None,
        push: bool = False,
    ) -> ExportResult:
        """Merge a succeeded job's adapter into its base as a whole model, saved with its tokenizer, chat template,
        generation config and card; with ``push`` (or a ``push_repo``) also push it as a model repository.

        Only the job's owner may export it (another user's job is not found). ``out`` (a folder on this machine) is
        for the CLI and the local admin; everyone else exports into the job's own folder. One export at a time per
        user and ``STUDIO_MAX_EXPORTS`` Space-wide (Busy otherwise), since a merge holds a whole model in memory.
        The merge runs in a child process with a time limit (``merge_in_child``); a failed push keeps the export
        and says why in ``push_error``.
        """
        from backend.hub.publish import PushError, push_merged
        from backend.workflows.export import ExportError, merge_in_child

        job = self.jobs.get_job(job_id, user)
        if user is not None and not user.local and job.owner != user.name:
            raise JobNotFound(job_id)  # a Space admin may look at another's job, but its model is its owner's to ship
        self.core.require_generating(job, "be exported as a merged language model")
        if out is not None and str(out).strip() and not may_name_server_paths(user):
            raise ExportError("only the person at this machine may name a folder on it; export to the job instead")
        own_folder = out is None or not str(out).strip()
        target = self.merged_folder(job.id) if own_folder else Path(str(out))
        release = self._exports.hold(user.name if user is not None else "")
        try:
            try:
                result = merge_in_child(job.id, self.core.paths, target, replace=own_folder)
            except ExportError as exc:  # a stranger's sentence names the job, never a folder of this machine
                if may_name_server_paths(user):
                    raise
                raise ExportError(self._said(str(exc), target)) from None
            if push or push_repo:
                token = token or (user.token if user is not None else None) or os.environ.get("HF_TOKEN")
                try:
                    pushed = push_merged(
                        job,
                        result.path,
                        token,
                        dtype=result.dtype,
                        dequantized=result.dequantized,
                        repo_id=push_repo or None,
                        private=private,
                    )
                except PushError as exc:
                    result = _with(result, push_error=str(exc))
                else:
                    result = _with(result, repo_id=pushed.repo_id, url=pushed.url)
            self.core.store.merge_artifacts(job.id, merged=result.record())
            return result if may_name_server_paths(user) else self._as_shown(result)
        finally:
            release()

    def _said(self, text: str, folder: Path) -> str:
        """``text`` as a stranger reads it: the export's ``folder`` named "its own folder", no server folder."""
        return server_paths_hidden(text.replace(str(folder), "its own folder"), self.core.paths.root)

    def _as_shown(self, result: ExportResult) -> ExportResult:
        """An export's answer as a stranger reads it, in its sentence and push error (``_said``)."""
        from dataclasses import replace

        error = self._said(result.push_error, result.path) if result.push_error else None
        return replace(result, sentence=self._said(result.sentence, result.path), push_error=error)

    def merged_archive(self, job_id: str, user: User | None = None) -> Path:
        """Zip the job's merged export into a fresh, unguessable ``downloads/<random>/`` path (whole or not at all);
        ValueError with a sentence when it has none."""
        from backend.workflows.archive import zip_adapter

        job = self.jobs.get_job(job_id, user)
        if user is not None and not user.local and job.owner != user.name:
            raise JobNotFound(job_id)
        merged = job.artifacts.merged
        if merged is None or not Path(merged.path).is_dir():
            raise ValueError(f"job {job.id} has no merged export yet: click Export merged model first")
        return zip_adapter(
            self.core.paths, Path(merged.path), f"merged-{job.spec.output.run_name or job.id}.zip", "merged model"
        )

    def use_snippets(self, job_id: str, user: User | None = None) -> list[UseSnippet]:
        """The "Use this model" snippets of a job: its adapter (pushed repo, else folder) and, once exported, its
        merged model (pushed repo, else folder)."""
        from backend.hub.snippets import use_snippets

        job = self.jobs.get_job(job_id, user)
        artifacts = job.artifacts
        name = job.spec.output.run_name or job.id
        adapter: str | None = artifacts.hub.repo_id if artifacts.hub else None
        if adapter is None and artifacts.adapter_dir:  # not pushed: a folder here, or the download's name elsewhere
            adapter = artifacts.adapter_dir if may_name_server_paths(user) else f"adapter-{name}"
        merged = artifacts.merged.repo_id if artifacts.merged else None
        if merged is None and artifacts.merged:
            merged = artifacts.merged.path if may_name_server_paths(user) else f"merged-{name}"
        return use_snippets(job.spec, job.id, adapter, merged)


def _with(
    result: ExportResult, repo_id: str | None = None, url: str | None = None, push_error: str | None = None
) -> ExportResult:
    """``result`` with a push's outcome (where it went, or why it did not), its sentence extended to say it."""
    from dataclasses import replace

    sentence = result.sentence
    if repo_id:
        sentence = f"{result.sentence} Pushed to {repo_id}."
    elif push_error:
        sentence = f"{result.sentence} Not pushed: {push_error}."
    return replace(result, repo_id=repo_id, url=url, push_error=push_error, sentence=sentence)
