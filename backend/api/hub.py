"""The facade's Hub operations: push a finished job, and run jobs on Hugging Face Jobs (send, list, status, cancel).

``StudioAPI`` (backend/api/studio.py) holds them as ``api.hub``; the UI reaches them only through ``backend.api``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backend.api.catalogue import AUTO_FLAVOR
from backend.api.core import StudioCore
from backend.api.jobs import JobOperations
from backend.core.spec import JobSpec, SpecError
from backend.core.users import User
from backend.jobs.store_errors import JobNotFound

if TYPE_CHECKING:
    from backend.hub.publish import PushResult
    from backend.jobs.remote_registry import RemoteJob


class HubOperations:
    """Push and Hugging Face Jobs (``api.hub``), over the facade's core and its jobs."""

    def __init__(self, core: StudioCore, jobs: JobOperations) -> None:
        self.core = core
        self.jobs = jobs

    def push_to_hub(
        self,
        job_id: str,
        user: User | None = None,
        repo_id: str | None = None,
        private: bool | None = None,
        token: str | None = None,
    ) -> PushResult:
        """Push a finished job's adapter with its model card (a retry after a failed auto-push, or a first push).

        The token is the signed-in user's (or HF_TOKEN locally); it is used for this call and kept nowhere.
        """
        import os

        from backend.hub.publish import push_job

        job = self.jobs.get_job(job_id, user)
        token = token or (user.token if user is not None else None) or os.environ.get("HF_TOKEN")
        return push_job(job, self.core.paths, self.core.store, token, repo_id=repo_id or None, private=private)

    def send_to_hf_jobs(
        self, spec: JobSpec | dict[str, Any] | str, user: User, flavor: str | None = AUTO_FLAVOR, timeout: str = "6h"
    ) -> str:
        """Run the job on Hugging Face Jobs instead of this machine; returns the HF job id, recorded for the user.

        The same worker runs there with the same spec (``python -m backend.remote_job`` in the studio's image) and
        pushes the adapter with the user's token, sent as a secret. ``flavor`` ``auto`` (or empty) is the smallest
        flavor that holds the job's memory estimate on the GPUs it asks for (backend/training/remote_fit.py).
        """
        from backend.hub.hf_jobs import submit_remote
        from backend.training.remote_fit import fitting_flavor

        spec = self.core.prepare(spec, user.name, user)
        if not user.token:
            raise SpecError(["sign in with Hugging Face (a token with the jobs scope) to use Hugging Face Jobs"])
        if not flavor or flavor == AUTO_FLAVOR:
            flavor, _ = fitting_flavor(spec, self.core.paths.models)
        hf_job_id = submit_remote(spec, user.token, flavor=flavor, timeout=timeout, namespace=user.name)
        self.core.remote.add(hf_job_id, user.name, spec.to_json(), flavor)
        return hf_job_id

    def _remote_job(self, hf_job_id: str, user: User) -> RemoteJob:
        """The recorded remote job, if ``user`` may see it; JobNotFound otherwise."""
        record = self.core.remote.get(hf_job_id)
        if record is None or not user.can_access(record.owner):
            raise JobNotFound(hf_job_id)
        return record

    def remote_job(self, hf_job_id: str, user: User) -> RemoteJob:
        """One recorded remote job of ``user``'s (JobNotFound for another's or an unknown id)."""
        return self._remote_job(hf_job_id, user)

    def list_remote_jobs(self, user: User, refresh: bool = False) -> list[RemoteJob]:
        """The jobs sent to Hugging Face Jobs that ``user`` may see (all of them for an admin), with the last stage
        seen; ``refresh`` reads the stage of the unfinished ones from the Hub first (with the user's token; a job
        the Hub cannot answer for keeps its last stage)."""
        records = self.core.remote.list(owner=None if user.is_admin else user.name)
        if not refresh or not user.token:
            return records
        from backend.hub.hf_jobs import RemoteJobError, remote_status

        for record in records:
            if record.status.finished or not user.can_access(record.owner):
                continue
            try:
                status = remote_status(record.hf_job_id, user.token, namespace=record.owner)
            except RemoteJobError:
                continue
            self.core.remote.record_status(record.hf_job_id, status.stage, status.message)
        return self.core.remote.list(owner=None if user.is_admin else user.name)

    def remote_job_url(self, record: RemoteJob) -> str:
        """The remote job's page on the Hub it was sent through."""
        from backend.core.hub_names import hub_endpoint

        return record.url(hub_endpoint())

    def remote_job_status(self, hf_job_id: str, user: User, log_lines: int = 60) -> tuple[str, str, list[str]]:
        """(stage, sentence, last log lines) of a job sent to Hugging Face Jobs, read with the user's token."""
        from backend.hub.hf_jobs import remote_logs, remote_status

        record = self._remote_job(hf_job_id, user)
        status = remote_status(hf_job_id, user.token, namespace=record.owner)
        self.core.remote.record_status(hf_job_id, status.stage, status.message)
        return status.stage, status.message, remote_logs(hf_job_id, user.token, tail=log_lines, namespace=record.owner)

    def cancel_remote_job(self, hf_job_id: str, user: User) -> None:
        """Ask Hugging Face Jobs to cancel one of the user's remote jobs."""
        from backend.hub.hf_jobs import cancel_remote

        record = self._remote_job(hf_job_id, user)
        cancel_remote(hf_job_id, user.token, namespace=record.owner)
