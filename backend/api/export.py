"""The facade's exports: a finished job's model queued as an export job (merged, GGUF, or its adapter zip), the
export's state for the Export panel, and the "Use this model" snippets."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.api.common import Submitted
from backend.api.core import StudioCore
from backend.api.jobs import JobOperations
from backend.core.artifacts import ExportOutcome
from backend.core.hub_names import HUB_REPO_ID_RULE, is_namespaced_repo_id
from backend.core.spec import JobSpec, SpecError, quote_input
from backend.core.users import User
from backend.jobs.access import may_name_server_paths, server_paths_hidden
from backend.jobs.lineage import saved_adapter
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.store_errors import JobNotFound
from backend.training.named_jobs import require_generating

if TYPE_CHECKING:
    from backend.hub.snippets import UseSnippet

MERGED_FOLDER = "merged"  # the UI's export goes into the job's own folder: jobs/<id>/merged


@dataclass(frozen=True)
class ExportView:
    """A job's last export as the Export panel shows it: the export job, its state, its phase, its sentence (or
    error) and its download (None until it succeeded with one)."""

    export_id: str
    status: JobStatus
    format: str
    phase: str | None
    sentence: str
    download: Path | None
    modelfile: str | None = None  # a GGUF export's Ollama Modelfile, to copy beside the downloaded file

    @property
    def active(self) -> bool:
        """Whether the export still waits or runs (the panel keeps following it)."""
        return not self.status.finished


class ExportOperations:
    """Exports (``api.export``), over the facade's core and its jobs: each is a job of its own kind in the queue."""

    def __init__(self, core: StudioCore, jobs: JobOperations) -> None:
        self.core = core
        self.jobs = jobs

    def merged_folder(self, job_id: str) -> Path:
        """Where a job's merged export goes: a folder of its own under the data dir."""
        return self.core.paths.job_dir(job_id) / MERGED_FOLDER

    def _own_job(self, job_id: str, user: User | None) -> JobRecord:
        """The job, if ``user`` may export it: only its owner (a Space admin may look at another's job, but its model
        is its owner's to ship); JobNotFound otherwise."""
        job = self.jobs.get_job(job_id, user)
        if user is not None and not user.local and job.owner != user.name:
            raise JobNotFound(job_id)
        return job

    def submit(
        self,
        job_id: str,
        user: User | None = None,
        format: str = "merged",
        gguf_type: str = "q8_0",
        push: bool = False,
        repo_id: str | None = None,
        private: bool = True,
        out: str | None = None,
        download: bool = True,
    ) -> Submitted:
        """Queue an export of a succeeded job's model: ``merged`` (its adapter folded into the base), ``gguf`` (that,
        as one GGUF file of ``gguf_type`` with a Modelfile and its quant check) or ``adapter`` (a zip); with
        ``download`` one file to download, with ``push`` (or a ``repo_id``) pushed to the Hub inside the job.

        Refused at once with a sentence (SpecError; nothing queued) when the job is not the user's or has nothing to
        export, when a field is bad, and when the user already has an export queued or running (ExportBusy: one at a
        time per user). The queue limits count it like any job. ``out`` (a folder here) is for the CLI and the
        person at this machine only.
        """
        job = self._own_job(job_id, user)
        push = bool(push or (repo_id or "").strip())
        repo_id = (repo_id or "").strip() or None
        spec = self._export_spec(job, user, format, gguf_type, push, repo_id, private, out, download)
        token = (user.token if user is not None else None) or os.environ.get("HF_TOKEN")
        if push and not (token or "").strip():
            raise SpecError(
                ["export.push: no Hugging Face token: sign in, or set HF_TOKEN to a token with write access"]
            )
        queue_limit, total_limit = self.core.queue_limits(user)
        record = self.core.store.add(spec, max_queued_for_owner=queue_limit, max_queued_total=total_limit)
        if push and token:
            self.core.tokens[record.id] = token
        self.core.kick()
        return Submitted(record, self.core.store.queue_position(record.id))

    def _export_spec(
        self,
        job: JobRecord,
        user: User | None,
        format: str,
        gguf_type: str,
        push: bool,
        repo_id: str | None,
        private: bool,
        out: str | None,
        download: bool,
    ) -> JobSpec:
        """The export job's spec, every field checked: a sentence per problem, nothing queued."""
        from backend.core.spec import EXPORT_FORMATS, GGUF_TYPES

        if format not in EXPORT_FORMATS:
            raise SpecError([f"export.format: {quote_input(format)} is not one of {', '.join(EXPORT_FORMATS)}"])
        if format == "gguf" and gguf_type not in GGUF_TYPES:
            raise SpecError([f"export.gguf_type: {quote_input(gguf_type)} is not one of {', '.join(GGUF_TYPES)}"])
        if job.spec.export is not None or job.spec.evaluate is not None:
            raise SpecError([f"export.job_id: job {job.id} is an {job.spec.kind} job, which has no model to export"])
        if saved_adapter(job) is None:
            raise SpecError(
                [f"export.job_id: job {job.id} is {job.status.value}: only a job that succeeded has a model to export"]
            )
        if format != "adapter":
            require_generating(job, "be exported as a merged language model")
            if not job.spec.lora.enabled:
                raise SpecError(
                    [f"export.format: job {job.id} trained all weights, its saved model is whole: export the adapter"]
                )
        if format == "gguf":
            from backend.platform.gguf_converter import converter_problem

            if problem := converter_problem():
                raise SpecError([f"export.format: {problem}"])
        if repo_id and not is_namespaced_repo_id(repo_id):
            raise SpecError([f"export.repo_id: {quote_input(repo_id)} must look like {HUB_REPO_ID_RULE}"])
        out = (out or "").strip() or None
        if out is not None and not may_name_server_paths(user):
            raise SpecError(["export.out: only the person at this machine may name a folder on it"])
        name = job.spec.output.run_name or job.id
        return JobSpec.from_dict(
            {
                "owner": job.owner,
                "model": {"name_or_path": job.spec.model.name_or_path},
                "export": {
                    "job_id": job.id, "format": format, "gguf_type": gguf_type, "push": push, "repo_id": repo_id,
                    "private": bool(private), "out": str(Path(out).expanduser().absolute()) if out else None,
                    "download": bool(download),
                },
                "output": {"run_name": f"{format} export of {name}"[:96]},
            }
        )  # fmt: skip

    def latest(self, job_id: str, user: User | None = None) -> ExportView | None:
        """The job's last export, as the Export panel shows it (None: never exported); a stranger's sentence names
        no folder of this machine. JobNotFound for a job that is not the user's."""
        job = self._own_job(job_id, user)
        export = self.core.store.latest_export(job.id)
        if export is None or export.spec.export is None:
            return None
        outcome: ExportOutcome | None = export.artifacts.export
        if export.status is JobStatus.succeeded and outcome is not None:
            sentence = outcome.sentence if outcome.push_error is None else f"⚠️ {outcome.sentence}"
        elif not export.status.finished:
            sentence = f"Export {export.id}: {(export.progress or {}).get('phase') or export.status.value}…"
        else:
            sentence = f"Export {export.id} {export.status.value}: {export.error or export.artifacts.cancel_note or ''}"
        if not may_name_server_paths(user):
            sentence = server_paths_hidden(sentence, self.core.paths.root)
        download = Path(outcome.download) if outcome is not None and outcome.download else None
        modelfile = None
        gguf = job.artifacts.gguf
        if outcome is not None and outcome.format == "gguf" and gguf is not None and gguf.modelfile:
            try:
                modelfile = Path(gguf.modelfile).read_text(encoding="utf-8")[:20_000]
            except OSError:
                modelfile = None
        return ExportView(
            modelfile=modelfile,
            export_id=export.id,
            status=export.status,
            format=export.spec.export.format,
            phase=(export.progress or {}).get("phase"),
            sentence=sentence.strip(),
            download=download if download is not None and download.is_file() else None,
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
