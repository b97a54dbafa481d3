"""Which ended jobs may be resumed, and the sentence for those that cannot (no processes: store rows and folders)."""

import pytest

from backend.api import StudioAPI
from backend.jobs.records import JobStatus
from backend.jobs.store_errors import InvalidTransition
from tests.helpers import tiny_spec


def _ended(api, status, error=None, checkpoint=False):
    job = api.jobs.submit(tiny_spec()).job
    assert api.core.store.claim_next().id == job.id
    if checkpoint:
        (api.core.paths.job_output(job.id) / "checkpoint-2").mkdir(parents=True)
        (api.core.paths.job_output(job.id) / "checkpoint-2" / "trainer_state.json").write_text("{}")
    api.core.store.finish(job.id, status, error, {"cancelled_at_step": 3} if status is JobStatus.cancelled else None)
    return api.jobs.get_job(job.id)


@pytest.mark.parametrize("status", [JobStatus.cancelled, JobStatus.failed])
def test_a_job_without_a_checkpoint_cannot_resume_and_says_why(data_dir, status):
    api = StudioAPI(data_dir, scheduler="none")
    job = _ended(api, status, "boom" if status is JobStatus.failed else None)
    assert not api.jobs.resumable(job)
    refusal = api.jobs.resume_refusal(job)
    assert "saved no checkpoint" in refusal and refusal.endswith(".")
    with pytest.raises(InvalidTransition, match="saved no checkpoint"):
        api.jobs.resume(job.id)
    assert api.jobs.get_job(job.id).status is status, "nothing was queued"


@pytest.mark.parametrize("status", [JobStatus.cancelled, JobStatus.failed, JobStatus.interrupted])
def test_a_job_with_a_checkpoint_resumes_without_its_old_ending(data_dir, status):
    api = StudioAPI(data_dir, scheduler="none")
    job = _ended(
        api, status, None if status is JobStatus.cancelled else "the worker was killed (SIGKILL)", checkpoint=True
    )
    assert api.jobs.resumable(job)
    queued = api.jobs.resume(job.id)
    assert queued.status is JobStatus.queued and queued.resume and queued.error is None
    assert queued.artifacts.cancelled_at_step is None


def test_a_cancelled_job_is_not_an_error_and_keeps_its_step(data_dir):
    api = StudioAPI(data_dir, scheduler="none")
    job = _ended(api, JobStatus.cancelled)
    assert job.error is None and job.cancelled_at_step == 3
    queued_then_cancelled = api.jobs.submit(tiny_spec()).job
    assert api.jobs.cancel(queued_then_cancelled.id) is JobStatus.cancelled
    record = api.jobs.get_job(queued_then_cancelled.id)
    assert record.error is None and record.cancelled_at_step is None  # cancelled before it started


def test_an_interrupted_job_without_a_checkpoint_still_starts_again_and_a_finished_one_does_not(data_dir):
    api = StudioAPI(data_dir, scheduler="none")
    assert api.jobs.resumable(_ended(api, JobStatus.interrupted, "the app stopped"))
    done = _ended(api, JobStatus.succeeded)
    assert not api.jobs.resumable(done) and "clone it" in api.jobs.resume_refusal(done)
