"""Exports in the queue (issue 49): one per user at once, refused in the transaction that would queue it; their own
lane when claimed; downloads a day old swept."""

from __future__ import annotations

import os
import time

import pytest

from backend.core.paths import DataPaths
from backend.core.spec import JobSpec, SpecError
from backend.jobs.records import JobStatus
from backend.jobs.store_errors import ExportBusy


def _export(owner: str, job_id: str = "src") -> JobSpec:
    return JobSpec(owner=owner, export={"job_id": job_id, "format": "adapter"})


def test_a_second_export_of_one_user_is_refused_at_once_and_another_users_is_not(store):
    first = store.add(_export("alice"))
    started = time.monotonic()
    with pytest.raises(ExportBusy) as refused:
        store.add(_export("alice", "other"))
    assert time.monotonic() - started < 1.0
    assert str(refused.value.problems[0]).startswith(f"your export {first.id} is still queued or running")
    assert [j.id for j in store.list(owner="alice")] == [first.id], "the refused export was stored"
    store.add(_export("bob"))  # another user's export is queued beside it
    store.add(JobSpec(owner="alice"))  # and a training job of alice's is not an export
    store.claim_next(exports=True)
    store.finish(first.id, JobStatus.succeeded)
    store.add(_export("alice"))  # once hers has ended, she may export again


def test_exports_and_training_are_claimed_in_their_own_lanes(store):
    training = store.add(JobSpec(owner="alice"))
    export = store.add(_export("bob"))
    assert store.queue_position(export.id) == 1, "an export's place counts only the exports ahead of it"
    assert store.claim_next(exports=True).id == export.id, "an export waits behind no training job"
    assert store.claim_next(exports=True) is None
    assert store.claim_next(exports=False).id == training.id
    assert store.latest_export("src").id == export.id and store.latest_export("nothing") is None


def test_an_export_job_trains_and_scores_nothing():
    with pytest.raises(SpecError, match="export: an export job scores nothing"):
        JobSpec.from_dict({"export": {"job_id": "x"}, "evaluate": {}, "benchmarks": {"tasks": ["studio_arith"]}})
    assert JobSpec(export={"job_id": "x"}).kind == "export"


def test_downloads_a_day_old_are_swept_and_newer_ones_kept(tmp_path):
    paths = DataPaths(tmp_path).ensure()
    old, new = paths.new_download("old.zip"), paths.new_download("new.zip")
    old.write_bytes(b"x" * 1000)
    new.write_bytes(b"y" * 10)
    day_ago = time.time() - 25 * 3600
    os.utime(old.parent, (day_ago, day_ago))
    assert paths.sweep_downloads() == 1000
    assert not old.parent.exists() and new.is_file()
