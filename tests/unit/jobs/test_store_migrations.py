"""The store file's schema version and its forward migrations (backend/jobs/migrations.py): a file of each shape that
shipped opens with every job listed whole and takes new jobs; a file newer than the code is refused untouched.

The shapes are the ``_SCHEMA`` of backend/store.py (later backend/jobs/store.py) and of backend/remote_registry.py at
each commit that changed them (``git log -p``), written out here: the code's own schema moves on, these must not.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from backend.core.spec import parse_spec
from backend.jobs.migrations import SCHEMA_VERSION, schema_version
from backend.jobs.records import JobStatus
from backend.jobs.remote_registry import RemoteRegistry
from backend.jobs.store import JobStore
from backend.jobs.store_errors import StoreError, StoreNeedsUpgrade, StoreTooNew
from tests.helpers.faults import read_only

JOBS_2026_11_29 = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    error TEXT,
    artifacts TEXT NOT NULL DEFAULT '{}',
    progress TEXT NOT NULL DEFAULT '{}',
    pid INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    resume INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, seq);
CREATE INDEX IF NOT EXISTS jobs_owner ON jobs(owner, seq);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    step INTEGER,
    ts REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_job ON metrics(job_id, id);
"""
SAMPLES_29ABA60 = """
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    step INTEGER,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_job ON samples(job_id, id);
"""
REMOTE_JOBS_B8D51FF = """
CREATE TABLE IF NOT EXISTS remote_jobs (
    hf_job_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    flavor TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_stage TEXT,
    last_message TEXT
)
"""
# The tester's file of issue 36: a jobs table without the columns the code reads for a worker, a cancel, a resume
# and an attempt count. No commit shipped it (the jobs table kept one shape from the first commit on), but a file
# copied from an early build or made by hand has it, and it opened with every job missing from the list.
JOBS_WITHOUT_LATER_COLUMNS = """
CREATE TABLE jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    error TEXT,
    artifacts TEXT NOT NULL DEFAULT '{}',
    progress TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    step INTEGER,
    ts REAL NOT NULL,
    data TEXT NOT NULL
);
"""
SHAPES = {
    "d64cfff jobs+metrics": JOBS_2026_11_29,
    "29aba60 +samples": JOBS_2026_11_29 + SAMPLES_29ABA60,
    "b8d51ff +remote_jobs (to issue 36)": JOBS_2026_11_29 + SAMPLES_29ABA60 + REMOTE_JOBS_B8D51FF,
    "jobs without pid/cancel_requested/resume/attempts": JOBS_WITHOUT_LATER_COLUMNS,
}


def _spec(owner: str, steps: int):
    return parse_spec({"owner": owner, "training": {"max_steps": steps}})


def _old_store(path: Path, schema: str) -> list[dict]:
    """A store file as an old build left it: its schema, user_version 0, WAL like the store made it, three jobs
    (one succeeded with outputs, one failed, one queued), metrics, and samples and a remote job where it had them."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.executescript(schema)
    columns = {row[1] for row in con.execute("PRAGMA table_info(jobs)")}
    jobs = [
        {"id": "20261129-080000-aaaaaa", "owner": "alice", "spec": _spec("alice", 4), "status": "succeeded",
         "created_at": 1000.0, "started_at": 1001.0, "finished_at": 1010.0, "error": None,
         "artifacts": {"adapter_dir": "/data/jobs/a/adapter"}, "progress": {"step": 4, "max_steps": 4},
         "attempts": 1},
        {"id": "20261129-080100-bbbbbb", "owner": "bob", "spec": _spec("bob", 5), "status": "failed",
         "created_at": 1020.0, "started_at": 1021.0, "finished_at": 1022.0, "error": "out of memory",
         "artifacts": {}, "progress": {"step": 1}, "attempts": 2},
        {"id": "20261129-080200-cccccc", "owner": "alice", "spec": _spec("alice", 6), "status": "queued",
         "created_at": 1030.0, "started_at": None, "finished_at": None, "error": None,
         "artifacts": {}, "progress": {}, "attempts": 0},
    ]  # fmt: skip
    for job in jobs:
        row = {**job, "spec": job["spec"].to_json(), "artifacts": json.dumps(job["artifacts"])}
        row["progress"] = json.dumps(job["progress"])
        row = {key: value for key, value in row.items() if key in columns}
        con.execute(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        if "attempts" not in columns:
            job["attempts"] = 0  # what the migration gives a job the file had no count for
    con.execute(
        "INSERT INTO metrics (job_id, step, ts, data) VALUES (?, 1, 1002.0, ?)", (jobs[0]["id"], '{"loss": 2.5}')
    )
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "samples" in tables:
        con.execute("INSERT INTO samples (job_id, step, data) VALUES (?, 1, ?)", (jobs[0]["id"], '{"reward": 1.0}'))
    if "remote_jobs" in tables:
        con.execute(
            "INSERT INTO remote_jobs (hf_job_id, owner, spec, flavor, created_at) VALUES ('hf-1', 'alice', '{}', "
            "'t4-small', 1040.0)"
        )
    con.commit()
    con.close()
    return jobs


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_store_of_each_shape_that_shipped_opens_whole_and_takes_new_jobs(tmp_path, shape):
    path = tmp_path / "studio.sqlite3"
    jobs = _old_store(path, SHAPES[shape])
    store = JobStore(path)
    try:
        listed = store.list()
        assert [j.id for j in listed] == [j["id"] for j in jobs], "every job of the old file is listed"
        for record, job in zip(listed, jobs):
            assert record.owner == job["owner"] and record.spec == job["spec"]
            assert record.status is JobStatus(job["status"]) and record.error == job["error"]
            assert (record.created_at, record.started_at, record.finished_at) == (
                job["created_at"],
                job["started_at"],
                job["finished_at"],
            )
            assert record.artifacts.stored() == job["artifacts"] and record.progress == job["progress"]
            assert record.attempts == job["attempts"]
            assert (record.pid, record.cancel_requested, record.resume) == (None, False, False)
        assert store.unreadable_rows() == []
        assert [m["loss"] for m in store.metrics(jobs[0]["id"])] == [2.5]
        # The store works as a new one: a submit, a claim (pid, attempts), a cancel flag, a resume.
        added = store.add(_spec("carol", 3))
        assert added.id in [j.id for j in store.list()] and added.attempts == 0
        claimed = store.claim_next()
        assert claimed is not None and claimed.id == jobs[2]["id"] and claimed.attempts == 1
        store.set_pid(claimed.id, 4242)
        assert store.request_cancel(claimed.id) is JobStatus.running and store.cancel_requested(claimed.id)
        assert store.finish(claimed.id, JobStatus.cancelled)
        assert store.requeue_for_resume(jobs[1]["id"]).resume
        store.report(jobs[0]["id"], [(2, 1003.0, {"loss": 2.0})], None, samples=[(2, {"reward": 0.5})])
        assert [s["reward"] for s in store.samples(jobs[0]["id"])][-1] == 0.5
        registry = RemoteRegistry(store)
        expected_remote = ["hf-1"] if "remote_jobs" in shape else []
        assert [r.hf_job_id for r in registry.list()] == expected_remote
        registry.add("hf-2", "carol", "{}", "cpu-basic")
        with store.reading() as con:
            assert schema_version(con) == SCHEMA_VERSION == 3
    finally:
        store.close()
    again = JobStore(path)  # a second open finds the current version and changes nothing
    try:
        assert len(again.list()) == len(jobs) + 1
    finally:
        again.close()


def test_a_store_written_by_a_newer_studio_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "studio.sqlite3"
    _old_store(path, JOBS_2026_11_29 + SAMPLES_29ABA60 + REMOTE_JOBS_B8D51FF)
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=DELETE")  # one file, so "left as it was" is its bytes
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    before = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    with pytest.raises(StoreTooNew) as refused:
        JobStore(path)
    message = str(refused.value)
    assert "written by a newer version of the studio" in message and str(path) in message
    assert f"schema version {SCHEMA_VERSION + 1}" in message and "STUDIO_DATA_DIR" in message
    assert isinstance(refused.value, StoreError)
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["studio.sqlite3"], "no WAL or journal was made beside it"


def test_a_jobs_table_no_studio_wrote_is_refused_with_a_sentence(tmp_path):
    path = tmp_path / "studio.sqlite3"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE jobs (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL)")
    con.close()
    with pytest.raises(StoreError, match="without its column 'owner', which cannot be added afterwards"):
        JobStore(path)
    con = sqlite3.connect(path)
    try:
        assert [r[1] for r in con.execute("PRAGMA table_info(jobs)")] == ["seq", "id", "spec"], "rolled back whole"
        assert schema_version(con) == 0
    finally:
        con.close()


def test_a_read_only_store_lacking_columns_asks_for_a_writable_folder(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _old_store(folder / "studio.sqlite3", JOBS_WITHOUT_LATER_COLUMNS)
    whole = folder / "whole.sqlite3"
    _old_store(whole, SHAPES["b8d51ff +remote_jobs (to issue 36)"])  # shipped: reads as it is, read-only too
    for path in (folder / "studio.sqlite3", whole):
        con = sqlite3.connect(path)
        con.execute("PRAGMA journal_mode=DELETE")
        con.close()
    with read_only(folder):
        with pytest.raises(StoreNeedsUpgrade, match=r"lacks jobs\.pid, .*needs its folder writable"):
            JobStore(folder / "studio.sqlite3")
        store = JobStore(whole)
        try:
            assert not store.writable() and len(store.list()) == 3
        finally:
            store.close()


def test_a_store_whose_tables_disagree_with_its_version_is_set_aside_and_its_jobs_kept(tmp_path):
    # Issue 48: a file at the current version whose jobs table lost columns (edited by hand, or by a tool that kept
    # the number) opened as it was, and every list and submit then failed with the generic error.
    from backend.api import StudioAPI

    data = tmp_path / "data"
    data.mkdir()
    path = data / "studio.sqlite3"
    jobs = _old_store(path, SHAPES["b8d51ff +remote_jobs (to issue 36)"])
    JobStore(path).close()  # brought to the current version
    con = sqlite3.connect(path)
    for column in ("attempts", "resume"):
        con.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    con.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    api = StudioAPI(data, scheduler="none")
    try:
        assert [j.id for j in api.jobs.list_jobs()] == [j["id"] for j in jobs], "every job is listed"
        assert api.core.store.add(_spec("carol", 3)).owner == "carol"
        notice = api.storage_notice() or ""
        assert "did not match its schema version" in notice and "jobs.resume, jobs.attempts" in notice, notice
        assert "3 jobs" in notice and "Delete that file" in notice, notice
    finally:
        api.close()
    kept = [p for p in data.iterdir() if p.name.startswith("studio.sqlite3.damaged-") and p.suffix != ".txt"]
    assert len(kept) == 1 and hashlib.sha256(kept[0].read_bytes()).hexdigest() == before, "kept byte for byte"
    again = StudioAPI(data, scheduler="none")  # the next start says it again, until the file is deleted
    try:
        assert len(again.jobs.list_jobs()) == 4 and "did not match" in (again.storage_notice() or "")
    finally:
        again.close()
