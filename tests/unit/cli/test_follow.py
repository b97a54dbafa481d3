"""Following a job from the command line (``backend.cli.records.follow_job``, for ``submit --wait`` and ``export``):
each reading is handed on until the job ends, and Ctrl-C stops the wait, never the job: exit code 130 and the
sentence that says how to cancel it."""

from __future__ import annotations

import pytest

from backend.api import JobStatus
from backend.cli import export, records
from tests.helpers import tiny_spec


def test_each_reading_is_handed_on_until_the_job_ends(api, monkeypatch):
    monkeypatch.setattr(records.time, "sleep", lambda seconds: None)
    job = api.jobs.submit(tiny_spec()).job
    seen: list[JobStatus] = []

    def reading(record) -> None:
        seen.append(record.status)
        if len(seen) == 3:
            api.jobs.cancel(job.id)  # queued: cancelled at once

    done = records.follow_job(api, job.id, reading, "stopped")
    assert done.status is JobStatus.cancelled
    assert seen == [JobStatus.queued] * 3 + [JobStatus.cancelled]


@pytest.mark.parametrize(
    "wait, what, said",
    [
        (lambda api, job_id: records.wait_for_job(api, job_id, quiet=True), "job", "Cancel it with: python -m backend"),
        (lambda api, job_id: export._follow(api, job_id, quiet=True), "export", "keeps running (python -m backend"),
    ],
    ids=["submit-wait", "export"],
)
def test_ctrl_c_stops_the_wait_not_the_job(api, monkeypatch, capsys, wait, what, said):
    job = api.jobs.submit(tiny_spec()).job

    def ctrl_c(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(records.time, "sleep", ctrl_c)
    with pytest.raises(SystemExit) as stopped:
        wait(api, job.id)
    assert stopped.value.code == 130
    err = capsys.readouterr().err
    assert f"Stopped waiting; {what} {job.id} keeps running" in err and f"{said} cancel {job.id}" in err, err
    assert api.jobs.get_job(job.id).status is JobStatus.queued, "the job goes on"
