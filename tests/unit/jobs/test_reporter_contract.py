"""One contract for every JobReporter: the SQLite JobStore (rank 0) and the NullReporter (other DDP ranks)."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from backend.core.artifacts import UnknownArtifact
from backend.core.spec import parse_spec
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.reporter import JobReporter, NullReporter
from backend.jobs.store import JobStore
from backend.jobs.store_errors import JobNotFound
from tests.helpers import tiny_spec

# What a running job may do to the store; a method added to the protocol must be added here and tested below.
METHODS = ("get", "cancel_requested", "report", "forget_reports_after", "merge_artifacts", "finish")


@pytest.fixture(params=["sqlite", "null"])
def setup(request, tmp_path) -> tuple[JobReporter, JobStore, str]:
    """(the reporter under test, the store underneath it, a running job's id)."""
    store = JobStore(tmp_path / "jobs.sqlite3")
    job_id = store.add(parse_spec(tiny_spec())).id
    assert store.claim_next().id == job_id
    return (store if request.param == "sqlite" else NullReporter(store)), store, job_id


def test_the_protocol_names_exactly_the_methods_a_job_uses():
    declared = {name for name, value in vars(JobReporter).items() if callable(value) and not name.startswith("_")}
    assert declared == set(METHODS)


@pytest.mark.parametrize("implementation", [JobStore, NullReporter])
@pytest.mark.parametrize("method", METHODS)
def test_each_method_takes_the_protocols_arguments(implementation, method):
    wanted = inspect.signature(getattr(JobReporter, method))
    got = inspect.signature(getattr(implementation, method))
    assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == [
        (p.name, p.kind, p.default) for p in wanted.parameters.values()
    ]


def test_it_is_a_job_reporter(setup):
    reporter, _, _ = setup
    assert isinstance(reporter, JobReporter)


def test_reads_answer_the_same(setup):
    reporter, store, job_id = setup
    job = reporter.get(job_id)
    assert isinstance(job, JobRecord) and job.id == job_id and job.status is JobStatus.running
    with pytest.raises(JobNotFound):
        reporter.get("nope")
    assert reporter.cancel_requested(job_id) is False
    store.request_cancel(job_id)
    assert reporter.cancel_requested(job_id) is True


def test_writes_take_the_same_arguments_and_return_the_same_kind(setup):
    reporter, _, job_id = setup
    assert reporter.report(job_id, [(1, 0.0, {"loss": 1.0})], {"step": 1}, [(1, {"completion": "hi"})]) is None
    assert reporter.report(job_id, [], None) is None
    assert reporter.forget_reports_after(job_id, 0) is None
    assert reporter.merge_artifacts(job_id, {"adapter_dir": "/a"}) is None
    assert reporter.merge_artifacts(job_id, global_step=3, hub={"repo_id": "me/x"}) is None
    assert isinstance(reporter.finish(job_id, JobStatus.cancelled, None, {"cancelled_at_step": 3}), bool)


def test_every_reporter_refuses_a_misspelled_artifact_or_a_wrong_type(setup):
    reporter, store, job_id = setup
    with pytest.raises(UnknownArtifact, match="'adapter_path' is not a job artifact"):
        reporter.merge_artifacts(job_id, adapter_path="/a")
    with pytest.raises(UnknownArtifact):
        reporter.merge_artifacts(job_id, {"global_stp": 1})
    with pytest.raises(ValidationError):
        reporter.merge_artifacts(job_id, global_step="three")
    with pytest.raises(UnknownArtifact):
        reporter.finish(job_id, JobStatus.cancelled, None, {"cancelled_at": 3})
    with pytest.raises(ValueError, match="not a final status"):
        reporter.finish(job_id, JobStatus.queued)
    job = store.get(job_id)
    assert job.status is JobStatus.running and job.artifacts.stored() == {}, "a refused write leaves the row alone"


def _write_everything(reporter: JobReporter, job_id: str) -> bool:
    reporter.report(job_id, [(1, 0.0, {"loss": 1.0}), (2, 1.0, {"loss": 0.5})], {"step": 2}, [(2, {"completion": "a"})])
    reporter.forget_reports_after(job_id, 1)
    reporter.merge_artifacts(job_id, adapter_dir="/a", performance={"tokens_per_second": 10.0})
    return reporter.finish(job_id, JobStatus.succeeded, None, {"global_step": 2})


def test_the_null_reporter_writes_nothing(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    job_id = store.add(parse_spec(tiny_spec())).id
    store.claim_next()
    assert _write_everything(NullReporter(store), job_id) is False, "nothing was finished"
    job = store.get(job_id)
    assert job.status is JobStatus.running and job.artifacts.stored() == {} and job.progress == {}
    assert store.metrics(job_id) == [] and store.samples(job_id) == []


def test_the_sqlite_reporter_persists(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    job_id = store.add(parse_spec(tiny_spec())).id
    store.claim_next()
    assert _write_everything(store, job_id) is True
    job = JobStore(store.db_path).get(job_id)  # a fresh instance: it is in the file
    assert job.status is JobStatus.succeeded and job.progress == {"step": 2}
    assert job.artifacts.adapter_dir == "/a" and job.artifacts.global_step == 2
    assert job.artifacts.performance == {"tokens_per_second": 10.0}
    assert [row["loss"] for row in store.metrics(job_id)] == [1.0], "the row after step 1 was forgotten"
    assert store.samples(job_id) == []
    assert store.finish(job_id, JobStatus.failed) is False, "a job finishes once"


def test_the_worker_reports_on_rank_0_only(paths, monkeypatch):
    from backend.worker import reporter_for_rank

    monkeypatch.delenv("RANK", raising=False)
    assert isinstance(reporter_for_rank(paths), JobStore)
    monkeypatch.setenv("RANK", "1")
    assert isinstance(reporter_for_rank(paths), NullReporter)
