"""Store contract tests: every store backend must pass these (today: SQLite on disk, fresh or reopened)."""

import json
import sqlite3
import threading

import pytest

from backend.core.artifacts import JobArtifacts
from backend.core.spec import SpecError, parse_spec
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.jobs.store_errors import InvalidTransition, JobNotFound, QuotaExceeded


def _spec(owner="local", **training):
    return parse_spec({"owner": owner, "training": {"max_steps": 3, **training}})


@pytest.fixture(params=["fresh", "reopened"])
def any_store(request, tmp_path):
    path = tmp_path / "jobs.sqlite3"
    if request.param == "reopened":
        earlier = JobStore(path)  # schema and an ended job created by another instance first
        earlier.request_cancel(earlier.add(_spec(owner="earlier")).id)
    return JobStore(path)


def test_uses_wal_journal(tmp_path):
    store = JobStore(tmp_path / "db.sqlite3")
    con = sqlite3.connect(store.db_path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_add_get_round_trips_spec_and_defaults(any_store):
    spec = _spec(owner="alice")
    job = any_store.add(spec)
    got = any_store.get(job.id)
    assert got.spec == spec and got.owner == "alice"
    assert got.status is JobStatus.queued and got.started_at is None and got.artifacts == JobArtifacts()


def test_unknown_job_raises(any_store):
    with pytest.raises(JobNotFound):
        any_store.get("nope")


def test_claim_is_fifo_and_atomic(any_store):
    ids = [any_store.add(_spec()).id for _ in range(3)]
    first = any_store.claim_next()
    assert first.id == ids[0] and first.status is JobStatus.running and first.attempts == 1
    assert any_store.queue_position(ids[1]) == 1 and any_store.queue_position(ids[2]) == 2
    assert any_store.queue_position(ids[0]) is None


def test_concurrent_claims_never_hand_out_a_job_twice(any_store):
    for _ in range(20):
        any_store.add(_spec())
    claimed, lock = [], threading.Lock()

    def claimer():
        while (job := any_store.claim_next()) is not None:
            with lock:
                claimed.append(job.id)

    threads = [threading.Thread(target=claimer) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    queued_before = [j.id for j in any_store.list() if j.owner == "local"]
    assert sorted(claimed) == sorted(set(claimed))
    assert set(queued_before) <= set(claimed)


def test_finish_only_moves_running_jobs(any_store):
    job = any_store.add(_spec())
    assert not any_store.finish(job.id, JobStatus.failed, "x")  # still queued
    assert any_store.claim_next().id == job.id
    assert any_store.finish(job.id, JobStatus.succeeded)
    assert not any_store.finish(job.id, JobStatus.failed, "late")  # first final status wins
    got = any_store.get(job.id)
    assert got.status is JobStatus.succeeded and got.error is None and got.finished_at


def test_finish_rejects_non_final_status(any_store):
    with pytest.raises(ValueError):
        any_store.finish("x", JobStatus.running)


def test_cancel_queued_is_immediate_running_is_flagged(any_store):
    a, b = any_store.add(_spec()), any_store.add(_spec())
    assert any_store.claim_next().id == a.id
    assert any_store.request_cancel(b.id) is JobStatus.cancelled
    assert any_store.get(b.id).status is JobStatus.cancelled
    assert any_store.request_cancel(a.id) is JobStatus.running
    assert any_store.cancel_requested(a.id) and any_store.get(a.id).status is JobStatus.running
    with pytest.raises(InvalidTransition):
        any_store.request_cancel(b.id)


def test_resume_only_from_interrupted_and_goes_to_back_of_queue(any_store):
    a = any_store.add(_spec())
    assert any_store.claim_next().id == a.id
    b = any_store.add(_spec())
    with pytest.raises(InvalidTransition):
        any_store.requeue_for_resume(a.id)  # running
    any_store.finish(a.id, JobStatus.interrupted, "app stopped")
    resumed = any_store.requeue_for_resume(a.id)
    assert resumed.status is JobStatus.queued and resumed.resume and resumed.error is None
    assert any_store.queue_position(a.id) == any_store.queue_position(b.id) + 1


def test_metrics_are_append_only_and_incremental(any_store):
    job = any_store.add(_spec())
    any_store.report(job.id, [(1, 10.0, {"loss": 2.0})], None)
    any_store.report(job.id, [(2, 11.0, {"loss": 1.5, "learning_rate": 1e-4})], {"step": 2})
    rows = any_store.metrics(job.id)
    assert rows[0]["ts"] == 10.0 and any_store.get(job.id).progress == {"step": 2}
    assert [r["loss"] for r in rows] == [2.0, 1.5] and rows[1]["step"] == 2
    assert [r["loss"] for r in any_store.metrics(job.id, after_id=rows[0]["id"])] == [1.5]


def test_artifacts_merge_and_progress_replace(any_store):
    job = any_store.add(_spec())
    any_store.merge_artifacts(job.id, {"log_file": "a"})
    any_store.merge_artifacts(job.id, {"adapter_dir": "b"})
    any_store.report(job.id, [], {"step": 1})
    any_store.report(job.id, [], {"step": 2, "total_steps": 4})
    got = any_store.get(job.id)
    assert got.artifacts.stored() == {"log_file": "a", "adapter_dir": "b"} and got.progress == {
        "step": 2,
        "total_steps": 4,
    }


def test_a_row_written_as_the_old_artifacts_dict_still_loads(any_store):
    # As versions before JobArtifacts stored them: a plain JSON object, here with a key this version does not know
    # (written by a newer one, or by hand) and a value of the wrong type.
    old = {
        "job_dir": "/d/jobs/x",
        "log_file": "/d/jobs/x/log.txt",
        "output_dir": "/d/jobs/x/output",
        "adapter_dir": "/d/jobs/x/adapter",
        "final_metrics": {"train_loss": 0.5, "epoch": 1},
        "global_step": 3,
        "reporting_overhead_s": 0.01,
        "auto_tune": {"choices": ["packing: off"], "settings": {"training.packing": False}},
        "evaluation": {"rows": 2, "base": {"eval_loss": 2.0}, "tuned": {"eval_loss": 1.0}},
        "hub": {"repo_id": "me/x", "url": "https://hf.co/me/x", "private": True},
        "hub_error": None,
        "preflight_warnings": ["few rows"],
        "resumed_from": None,
        "from_a_newer_version": {"a": 1},
        "environment_server_pid": "not a pid",
    }
    job = any_store.add(_spec())
    with sqlite3.connect(any_store.db_path) as con:
        con.execute("UPDATE jobs SET artifacts = ? WHERE id = ?", (json.dumps(old), job.id))
    got = any_store.get(job.id)
    assert got.artifacts.adapter_dir == "/d/jobs/x/adapter" and got.artifacts.global_step == 3
    assert got.artifacts.final_metrics == {"train_loss": 0.5, "epoch": 1}
    assert got.artifacts.auto_tune.settings == {"training.packing": False}
    assert got.artifacts.hub.repo_id == "me/x" and got.artifacts.hub.private is True
    assert got.artifacts.preflight_warnings == ["few rows"] and got.artifacts.evaluation["tuned"]["eval_loss"] == 1.0
    assert got.artifacts.environment_server_pid is None, "a value of the wrong type is left out, not the whole job"
    assert not hasattr(got.artifacts, "from_a_newer_version"), "an unknown key is ignored on read"
    assert got.to_dict()["artifacts"] == {
        k: v for k, v in old.items() if k not in ("from_a_newer_version", "environment_server_pid")
    }
    any_store.merge_artifacts(job.id, cancel_note="stopped")
    with sqlite3.connect(any_store.db_path) as con:
        row = json.loads(con.execute("SELECT artifacts FROM jobs WHERE id = ?", (job.id,)).fetchone()[0])
    assert row == {**old, "cancel_note": "stopped"}, "a merge keeps the keys this version does not read"


def test_list_filters_by_owner_and_status(any_store):
    a = any_store.add(_spec(owner="alice"))
    any_store.add(_spec(owner="bob"))
    assert [j.id for j in any_store.list(owner="alice")] == [a.id]
    assert all(j.status is JobStatus.queued for j in any_store.list(statuses=[JobStatus.queued]))


def _strict_json(text):
    """json.loads that refuses Python's NaN/Infinity extension, as a browser or another language would."""

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_spec_that_would_not_read_back_is_refused_and_nothing_is_stored(any_store):
    spec = _spec(owner="alice")
    # model_copy skips validation, as any code building a spec by hand could: the store is the last guard.
    poisoned = spec.model_copy(update={"training": spec.training.model_copy(update={"epochs": float("inf")})})
    before = [j.id for j in any_store.list()]
    with pytest.raises(SpecError) as err:
        any_store.add(poisoned)
    assert err.value.problems == ["training.epochs: Input should be a valid number"]
    assert [j.id for j in any_store.list()] == before and any_store.unreadable_rows() == []
    assert any_store.add(spec).spec == spec, "the store keeps working"


def test_non_finite_metrics_progress_samples_and_artifacts_are_stored_as_strict_json(any_store):
    job = any_store.add(_spec())
    nan, inf = float("nan"), float("inf")
    any_store.report(
        job.id,
        [(1, 10.0, {"loss": nan, "grad_norm": inf, "nested": [1.0, -inf]})],
        {"step": 1, "loss": nan},
        samples=[(1, {"completion": "x", "rewards": {"r": -inf}})],
    )
    any_store.merge_artifacts(job.id, {"evaluation": {"tuned": {"eval_loss": nan}}})
    [row] = any_store.metrics(job.id)
    assert row["loss"] is None and row["grad_norm"] is None and row["nested"] == [1.0, None]
    got = any_store.get(job.id)
    assert got.progress["loss"] is None and got.artifacts.evaluation["tuned"]["eval_loss"] is None
    assert any_store.samples(job.id)[0]["rewards"] == {"r": None}
    con = sqlite3.connect(any_store.db_path)
    texts = [
        r[0]
        for r in con.execute(
            "SELECT data FROM metrics UNION ALL SELECT data FROM samples "
            "UNION ALL SELECT progress FROM jobs UNION ALL SELECT artifacts FROM jobs"
        )
    ]
    con.close()
    [_strict_json(text) for text in texts]


def test_add_with_a_queue_limit_refuses_past_it_and_stores_nothing(any_store):
    kept = [any_store.add(_spec(owner="alice"), max_queued_for_owner=2) for _ in range(2)]
    with pytest.raises(QuotaExceeded) as err:
        any_store.add(_spec(owner="alice"), max_queued_for_owner=2)
    assert err.value.problems == [
        "you already have 2 job(s) waiting in the queue and the limit per user is 2: "
        "wait for one to start, or cancel one"
    ]
    with pytest.raises(QuotaExceeded):
        any_store.check_queue_room("alice", 2)
    assert [j.id for j in any_store.list(owner="alice")] == [j.id for j in kept]
    any_store.add(_spec(owner="bob"), max_queued_for_owner=2)  # bob is not held up by alice
    any_store.request_cancel(kept[0].id)
    any_store.add(_spec(owner="alice"), max_queued_for_owner=2)  # a cancelled job frees its place


def test_a_resumed_job_keeps_each_step_once(any_store):
    job = any_store.add(_spec())
    first_attempt = [(step, float(step), {"loss": 10.0 - step}) for step in range(1, 8)]
    any_store.report(job.id, first_attempt, None, samples=[(step, {"completion": f"a{step}"}) for step in range(1, 8)])
    kept_ids = [m["id"] for m in any_store.metrics(job.id)][:4]

    any_store.forget_reports_after(job.id, 4)  # the worker resumes from checkpoint-4
    any_store.report(
        job.id,
        [(step, 100.0 + step, {"loss": 1.0 / step}) for step in range(5, 10)],
        None,
        samples=[(step, {"completion": f"b{step}"}) for step in range(5, 10)],
    )

    rows = any_store.metrics(job.id)
    assert [r["step"] for r in rows] == list(range(1, 10))
    assert [r["id"] for r in rows[:4]] == kept_ids and all(r["ts"] > 100 for r in rows[4:])
    assert [s["completion"] for s in any_store.samples(job.id)] == [
        "a1",
        "a2",
        "a3",
        "a4",
        "b5",
        "b6",
        "b7",
        "b8",
        "b9",
    ]


def test_listing_parses_each_stored_spec_once(any_store, monkeypatch):
    """The Jobs tab lists every job every 2 s: a stored spec is validated once per process, not on every read."""
    import backend.jobs.records as store_module

    calls = []
    real = store_module.parse_spec
    monkeypatch.setattr(store_module, "parse_spec", lambda text: calls.append(text) or real(text))
    store_module._stored_spec.cache_clear()
    for i in range(3):
        any_store.add(parse_spec({"method": "sft", "output": {"run_name": f"cached-{i}"}}))
    calls.clear()  # add() reads each spec back once to check it round-trips
    store_module._stored_spec.cache_clear()
    first = any_store.list()
    assert len(calls) == len(first) >= 3
    assert any_store.list() == first and len(calls) == len(first), "a second listing parsed the specs again"


def _staged(parent_id: str):
    return parse_spec({"training": {"max_steps": 3}, "model": {"parent_job_id": parent_id}})


def test_a_staged_job_waits_for_its_parent_without_blocking_the_queue(any_store):
    parent = any_store.add(_spec())
    child = any_store.add(_staged(parent.id))
    other = any_store.add(_spec())
    assert any_store.claim_next().id == parent.id
    assert any_store.claim_next().id == other.id, "the waiting child lets the next job pass"
    assert any_store.claim_next() is None and any_store.get(child.id).status is JobStatus.queued
    any_store.merge_artifacts(parent.id, {"adapter_dir": "/somewhere/adapter"})
    any_store.finish(parent.id, JobStatus.succeeded)
    assert any_store.claim_next().id == child.id


@pytest.mark.parametrize("ending", [JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted])
def test_a_staged_job_whose_parent_ended_without_an_adapter_fails_with_the_reason(any_store, ending):
    parent = any_store.add(_spec())
    child = any_store.add(_staged(parent.id))
    any_store.claim_next()
    any_store.finish(parent.id, ending, "stopped")
    assert any_store.claim_next() is None
    failed = any_store.get(child.id)
    assert failed.status is JobStatus.failed
    assert failed.error == (
        f"the job it continues ({parent.id}) ended {ending.value} with no adapter to start from; "
        "queue this job again once that one has succeeded"
    )
