"""Processes are a resource like any other: the ceiling on a job's ``training.num_processes`` (the machine's cores
without a GPU, ``STUDIO_MAX_PROCESSES_PER_JOB`` for a Space's users) and a job of N processes taking N places in
the queue limits (per user, the whole Space, a sweep's children). No app, no training: the facade with no scheduler
and the store."""

from __future__ import annotations

import os
import sqlite3

import pytest

import backend.platform.hardware
from backend.core.spec import SpecError, parse_spec
from backend.core.users import User
from backend.jobs.store import JobStore
from backend.jobs.store_errors import QueueFull, QuotaExceeded
from backend.jobs.sweeps import SweepStore
from backend.platform.hardware import usable_cores
from backend.training.process_limit import process_ceiling_problems
from tests.helpers import tiny_spec

# What issue 48 sent: 64 processes whose global batch splits evenly (64 x 1 accumulated over 64 steps).
MANY = {"num_processes": 64, "gradient_accumulation_steps": 64, "batch_size": 1}
MANY_AS_GPUS = {"num_gpus": 64, "gradient_accumulation_steps": 64, "batch_size": 1}
ALICE, OWNER = User("alice"), User("space-owner", is_admin=True)


@pytest.fixture()
def two_cores_no_gpu(monkeypatch):
    """A machine of 2 usable cores and no GPU, whatever runs the test; off a Space unless a test says otherwise."""
    monkeypatch.setattr(backend.platform.hardware, "usable_cores", lambda: 2)
    monkeypatch.setattr(backend.platform.hardware, "gpu_count_without_torch", lambda: 0)
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("STUDIO_MAX_PROCESSES_PER_JOB", raising=False)


# --- the ceiling ------------------------------------------------------------------------------------------------


def test_usable_cores_are_the_affinity_less_a_cgroup_quota(tmp_path):
    cpus = len(os.sched_getaffinity(0))
    assert usable_cores(tmp_path) == cpus  # no cgroup files: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(tmp_path) == cpus  # no quota
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU's time: one core's worth
    assert usable_cores(tmp_path) == 1
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # cgroup v1 without a quota
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(tmp_path) == cpus


@pytest.mark.parametrize("training", [MANY, MANY_AS_GPUS], ids=["num_processes", "num_gpus"])
def test_without_a_gpu_a_job_may_start_no_more_processes_than_the_cores(two_cores_no_gpu, training):
    spec = parse_spec(tiny_spec(training=training))
    expected = [
        "training.num_processes: this machine has no GPU, so each of the 64 processes would be a CPU process, and "
        "the studio may use 2 cores here; lower it to 2 or fewer, or send the job to a machine with GPUs"
    ]
    # Everyone: the CLI, the local admin, a Space's owner (more CPU processes than cores are never any faster).
    assert process_ceiling_problems(spec) == expected
    assert process_ceiling_problems(spec, OWNER) == expected
    assert process_ceiling_problems(parse_spec(tiny_spec(training={"num_processes": 2}))) == []


def test_on_a_space_a_user_starts_one_process_unless_the_owner_allows_more(two_cores_no_gpu, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "space-owner/post-training-studio")
    two = parse_spec(tiny_spec(training={"num_processes": 2}))
    assert process_ceiling_problems(two, ALICE) == [
        "training.num_processes: a job on this Space may start at most 1 training process "
        "(STUDIO_MAX_PROCESSES_PER_JOB = 1, set by the Space's owner) and this one asks for 2; lower it to 1, or "
        "duplicate the Space to run more"
    ]
    assert process_ceiling_problems(two, OWNER) == [] and process_ceiling_problems(two) == []
    monkeypatch.setenv("STUDIO_MAX_PROCESSES_PER_JOB", "8")  # the owner allows 8, the machine has 2 cores
    assert process_ceiling_problems(two, ALICE) == []
    assert "the studio may use 2 cores here" in process_ceiling_problems(parse_spec(tiny_spec(training=MANY)), ALICE)[0]


def test_with_gpus_the_cores_do_not_count_and_the_space_setting_still_does(monkeypatch):
    monkeypatch.setattr(backend.platform.hardware, "usable_cores", lambda: 2)
    monkeypatch.setattr(backend.platform.hardware, "gpu_count_without_torch", lambda: 8)
    monkeypatch.setenv("SPACE_ID", "space-owner/post-training-studio")
    monkeypatch.setenv("STUDIO_MAX_PROCESSES_PER_JOB", "4")
    assert process_ceiling_problems(parse_spec(tiny_spec(training={"num_processes": 4})), ALICE) == []
    eight = parse_spec(tiny_spec(training={"num_processes": 8}))
    assert "STUDIO_MAX_PROCESSES_PER_JOB = 4" in process_ceiling_problems(eight, ALICE)[0]
    assert process_ceiling_problems(eight, OWNER) == []  # the GPU rule (one per GPU) is pre-flight's


@pytest.mark.parametrize("training", [MANY, MANY_AS_GPUS], ids=["num_processes", "num_gpus"])
def test_submit_and_check_refuse_before_anything_is_stored(api, two_cores_no_gpu, training):
    for ask in (lambda s: api.jobs.submit(s, user=ALICE), lambda s: api.jobs.check(s, user=ALICE), api.jobs.submit):
        with pytest.raises(SpecError, match=r"^training.num_processes: .* 64 processes .* 2 cores here"):
            ask(tiny_spec(training=training))
    assert api.jobs.list_jobs() == []


def test_a_sweep_child_over_the_ceiling_is_refused_naming_the_child(api, store, two_cores_no_gpu):
    spec = tiny_spec(training={"batch_size": 4}, eval={"holdout_rows": 16})
    with pytest.raises(SpecError, match=r"may use 2 cores here; .* \(the child with training.num_processes = 4\)"):
        api.sweeps.submit(spec, ["training.num_processes=1,4"], user=ALICE)
    assert store.list() == [] and SweepStore(store).list() == []


# --- a job of N processes takes N places --------------------------------------------------------------------------


def _spec(owner: str, processes: int = 1):
    return parse_spec({"owner": owner, "training": {"max_steps": 3, "num_processes": processes}})


def test_a_job_of_n_processes_takes_n_of_the_users_places(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    with pytest.raises(QuotaExceeded) as refused:
        store.add(_spec("alice", 4), max_queued_for_owner=3)
    assert refused.value.problems == [
        "training.num_processes: a job of 4 processes takes 4 places in the queue (one per process) and the limit "
        "per user is 3; lower it to 3 or fewer"
    ]
    store.add(_spec("alice", 2), max_queued_for_owner=3)
    with pytest.raises(QuotaExceeded) as refused:
        store.add(_spec("alice", 2), max_queued_for_owner=3)
    assert refused.value.problems == [
        "a job of 2 processes takes 2 of your 3 places in the queue (one per training process), and your 1 waiting "
        "job(s) already take 2: wait for one to start, or cancel one"
    ]
    with pytest.raises(QuotaExceeded, match="takes 2 of your 3 places"):
        store.check_queue_room("alice", 3, None, 2)
    store.add(_spec("alice"), max_queued_for_owner=3)  # one more process fits: 2 + 1
    store.add(_spec("bob", 3), max_queued_for_owner=3)  # bob's places are his own
    assert [j.owner for j in store.list()] == ["alice", "alice", "bob"]


def test_a_job_of_n_processes_takes_n_of_the_spaces_places(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    store.add(_spec("alice", 3), max_queued_total=4)
    with pytest.raises(QueueFull) as refused:
        store.add(_spec("bob", 2), max_queued_total=4)
    assert refused.value.problems == [
        "the queue is full for this job: a job of 2 processes takes 2 of the 4 places this Space holds "
        "(STUDIO_MAX_QUEUED_TOTAL = 4), and the 1 waiting job(s) take 3 (one place per training process); try again "
        "once some have started, or lower training.num_processes"
    ]
    with pytest.raises(QueueFull, match="^training.num_processes: a job of 8 processes takes 8 places"):
        store.check_queue_room("bob", 100, 4, 8)
    store.add(_spec("bob"), max_queued_total=4)
    assert len(store.list()) == 2


def test_rows_stored_before_the_rename_or_damaged_count_sensibly(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    old, damaged = store.add(_spec("alice")), store.add(_spec("alice"))
    con = sqlite3.connect(store.db_path)
    con.execute("UPDATE jobs SET spec = ? WHERE id = ?", ('{"training": {"num_gpus": 2}}', old.id))  # num_gpus: 2
    con.execute("UPDATE jobs SET spec = ? WHERE id = ?", ("{not json", damaged.id))  # 1, and the count still answers
    con.commit()
    con.close()
    with pytest.raises(QuotaExceeded, match="your 2 waiting job.s. already take 3"):
        store.check_queue_room("alice", 3)


def test_a_sweeps_children_take_a_place_per_process(api, store, two_cores_no_gpu, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "4")
    spec = tiny_spec(training={"batch_size": 4, "num_processes": 2}, eval={"holdout_rows": 16})
    with pytest.raises(SpecError, match=r"this sweep queues 3 job.s. taking 6 places \(one per process\) and you"):
        api.sweeps.submit(spec, ["training.learning_rate=1e-4,5e-4,1e-3"], user=User("alice"))
    assert store.list() == [] and SweepStore(store).list() == []


def test_a_stored_job_of_64_processes_is_not_resumed(api, store, two_cores_no_gpu):
    old = store.add(parse_spec(tiny_spec(owner="alice", training=MANY)))  # queued before the ceiling existed
    store.request_cancel(old.id)  # cancelled while queued: interrupted would resume from the beginning
    con = sqlite3.connect(store.db_path)
    con.execute("UPDATE jobs SET status = 'interrupted' WHERE id = ?", (old.id,))
    con.commit()
    con.close()
    with pytest.raises(SpecError, match=r"^training.num_processes: .* 64 processes .* 2 cores here"):
        api.jobs.resume(old.id, user=ALICE)
    assert store.get(old.id).status.value == "interrupted"
