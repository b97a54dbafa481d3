"""The job pickers the tabs share (Train's parent job, the Jobs tab's job, Chat's job): what they list and the job id a
pick names. Gradio-free, so every tab can use it without importing another tab."""

from __future__ import annotations

from backend.api import StudioAPI


def job_choice_id(choice: str | None) -> str | None:
    """Job pickers show ``<id> · <name>``; the id is the first word."""
    return choice.split()[0] if choice and choice.strip() else None


def finished_job_choices(api: StudioAPI, user, generates: bool | None = None) -> list[str]:
    """The pickers of a finished job (Train's parent job, Chat's job): ``<id> · <method> · <name>``, newest first;
    ``generates`` as ``api.jobs.finished_jobs`` takes it (Chat's pickers list only models that write answers)."""
    if user is None:
        return [""]
    return [""] + [
        f"{j.id} · {j.spec.method.value} · {j.spec.output.run_name or j.spec.dataset.name}"
        for j in api.jobs.finished_jobs(user, generates)
    ]
