"""backend/training/named_jobs.py: the jobs a spec names, each read once, and the parent-job rule (yours, an adapter,
succeeded with it saved, or still queued or running) on a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.core.spec import SpecError, parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.training.named_jobs import NamedJobs, read_named_jobs
from tests.helpers import tiny_spec

ALICE, BOB = User("alice"), User("bob")


def stored(store: JobStore, spec) -> Path | None:
    """The adapter a stored job starts from, as the worker reads it (None: a fresh start)."""
    return read_named_jobs(spec, store, stored=True).adapter()


def _job(store: JobStore, status: JobStatus, adapter: Path | None = None, **spec):
    """A job of alice's ended (or left) in ``status``, with ``adapter`` recorded as its saved adapter."""
    job = store.add(parse_spec(tiny_spec(owner="alice", **spec)))
    if status is JobStatus.queued:
        return job
    assert store.claim_next().id == job.id
    if adapter is not None:
        store.merge_artifacts(job.id, {"adapter_dir": str(adapter)})
    if status is not JobStatus.running:
        store.finish(job.id, status, None if status is JobStatus.succeeded else "stopped")
    return store.get(job.id)


def _child(parent_id: str, **spec):
    return parse_spec(
        tiny_spec(
            method="dpo",
            dataset={"source": "builtin", "name": "preferences-demo"},
            model={"parent_job_id": parent_id},
            owner="alice",
            **spec,
        )
    )


@pytest.fixture()
def adapter(tmp_path) -> Path:
    folder = tmp_path / "adapter"
    folder.mkdir()
    return folder


def test_a_fresh_spec_has_no_parent(store):
    spec = parse_spec(tiny_spec())
    assert read_named_jobs(spec, store) == NamedJobs(spec)
    assert stored(store, spec) is None and NamedJobs(spec).adapter() is None


def test_a_succeeded_parent_gives_its_base_lora_shape_and_adapter(store, adapter):
    parent = _job(store, JobStatus.succeeded, adapter, lora={"r": 4, "alpha": 8})
    named = read_named_jobs(_child(parent.id, lora={"r": 32}), store, ALICE)
    assert named.parent.id == parent.id
    assert named.spec.model.parent_job_id == parent.id
    assert named.spec.model.name_or_path == parent.spec.model.name_or_path
    assert named.spec.lora == parent.spec.lora and named.spec.lora.r == 4
    assert named.adapter() == adapter
    assert stored(store, named.spec) == adapter


def test_another_users_parent_is_not_found_and_an_admin_or_trusted_caller_reads_it(store, adapter):
    parent = _job(store, JobStatus.succeeded, adapter)
    with pytest.raises(SpecError) as err:
        read_named_jobs(_child(parent.id), store, BOB)
    assert err.value.problems == [f"model.parent_job_id: there is no job '{parent.id}'"]
    assert read_named_jobs(_child(parent.id), store, User("root", is_admin=True)).spec.model.parent_job_id == parent.id
    assert read_named_jobs(_child(parent.id), store).spec.model.parent_job_id == parent.id


def test_a_missing_parent_is_not_found(store):
    with pytest.raises(SpecError, match=r"^model.parent_job_id: there is no job 'nope'$"):
        read_named_jobs(_child("nope"), store)
    with pytest.raises(SpecError, match="there is no job 'nope'"):
        stored(store, _child("nope"))


@pytest.mark.parametrize("status", [JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted])
def test_a_parent_that_ended_otherwise_cannot_be_continued(store, adapter, status):
    parent = _job(store, status, adapter)
    with pytest.raises(SpecError) as err:
        read_named_jobs(_child(parent.id), store)
    assert err.value.problems == [
        f"model.parent_job_id: job {parent.id} is {status.value}; only the adapter of a job that succeeded, or is "
        "queued or running, can be trained further"
    ]


@pytest.mark.parametrize("status", [JobStatus.queued, JobStatus.running])
def test_a_queued_or_running_parent_is_a_staged_pair_with_no_adapter_yet(store, status):
    parent = _job(store, status)
    named = read_named_jobs(_child(parent.id), store)
    assert named.spec.model.parent_job_id == parent.id
    with pytest.raises(SpecError, match=f"job {parent.id} has no saved adapter to start from"):
        named.adapter()
    with pytest.raises(SpecError, match=f"job {parent.id} has no saved adapter to start from"):
        stored(store, named.spec)


def test_a_succeeded_parent_whose_adapter_is_gone_is_refused_at_submit(store, tmp_path):
    parent = _job(store, JobStatus.succeeded, tmp_path / "deleted")
    with pytest.raises(SpecError) as err:
        read_named_jobs(_child(parent.id), store)
    assert err.value.problems == [f"model.parent_job_id: job {parent.id} has no saved adapter to start from"]


def test_a_full_weights_parent_has_no_adapter_to_continue(store, adapter):
    parent = _job(store, JobStatus.succeeded, adapter, lora={"enabled": False})
    with pytest.raises(SpecError, match=f"job {parent.id} trained all weights, not an adapter"):
        read_named_jobs(_child(parent.id), store)


def test_the_facade_reads_the_parent_row_once(paths, adapter, monkeypatch):
    api = StudioAPI(paths.root, scheduler="none")
    parent = _job(api.core.store, JobStatus.succeeded, adapter)
    reads = []
    real_get = api.core.store.get
    monkeypatch.setattr(api.core.store, "get", lambda job_id: reads.append(job_id) or real_get(job_id))
    named = api.core.named(_child(parent.id), user=ALICE)
    assert named.adapter() == adapter and reads == [parent.id]
