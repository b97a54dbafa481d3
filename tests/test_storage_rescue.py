"""A damaged snapshot of the store is never total loss (issue 36): it is set aside under a name of its own before
anything is written over it, its rows are recovered into the new store, and the header and ``status`` name it and say
how many jobs came back. The damage is real: pages of a real store overwritten with random bytes."""

from __future__ import annotations

import hashlib
import random
import sqlite3
from pathlib import Path

import pytest

from backend.core.spec import parse_spec
from backend.jobs.store import JobStore
from backend.platform.sqlite_recovery import recover_database
from backend.platform.storage import backup_store, snapshot_ok

PAGE = 4096


def _store_with_jobs(path: Path, jobs: int, metrics_per_job: int = 10) -> dict[str, dict]:
    """A real store with ``jobs`` jobs (owners and specs differ) and their metrics; returns what each job holds."""
    store = JobStore(path)
    made = {}
    try:
        for i in range(jobs):
            spec = parse_spec({"owner": f"user{i % 5}", "training": {"max_steps": 3 + i}})
            job = store.add(spec)
            store.report(job.id, [(s, 1.0, {"loss": 1.0 / (s + 1)}) for s in range(metrics_per_job)], {"step": 9})
            made[job.id] = {"owner": spec.owner, "spec": spec}
    finally:
        store.close()
    return made


def _damage(path: Path, pages: int, seed: int, table: str = "jobs") -> int:
    """Overwrite ``pages`` leaf pages of ``table`` with random bytes; returns how many rows they held (the rows no
    recovery can bring back). Which pages, and how many rows each holds, is SQLite's own dbstat table's answer."""
    con = sqlite3.connect(path)
    try:
        leaves = con.execute("SELECT pageno, ncell FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,))
        cells = dict(leaves.fetchall())
    finally:
        con.close()
    rng = random.Random(seed)
    chosen = rng.sample(sorted(cells), pages)
    with open(path, "r+b") as fh:
        for page in chosen:
            fh.seek((page - 1) * PAGE)
            fh.write(rng.randbytes(PAGE))
    return sum(cells[page] for page in chosen)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_recovery_saves_every_row_off_the_damaged_pages(tmp_path):
    made = _store_with_jobs(tmp_path / "live.sqlite3", 120)
    damaged = tmp_path / "snapshot.sqlite3"
    backup_store(tmp_path / "live.sqlite3", damaged)
    lost_jobs = _damage(damaged, 4, seed=7)
    lost_metrics = _damage(damaged, 3, seed=8, table="metrics")
    assert snapshot_ok(damaged) is not None, "the damage is real: quick_check fails"
    con = sqlite3.connect(damaged)
    with pytest.raises(sqlite3.DatabaseError):  # a plain read stops at the first damaged page
        con.execute("SELECT * FROM jobs").fetchall()
    con.close()
    before = _digest(damaged)
    recovery = recover_database(damaged, tmp_path / "recovered.sqlite3")
    assert recovery.error is None and recovery.damaged_stretches >= 2
    assert _digest(damaged) == before, "the damaged file is only read"
    assert snapshot_ok(tmp_path / "recovered.sqlite3") is None
    store = JobStore(tmp_path / "recovered.sqlite3")
    try:
        listed = store.list()
        # Every job that was not on a damaged page comes back, whole.
        assert 0 < lost_jobs and len(listed) == len(made) - lost_jobs
        assert recovery.rows["jobs"] == len(listed) and store.unreadable_rows() == []
        for job in listed:
            assert (job.owner, job.spec) == (made[job.id]["owner"], made[job.id]["spec"])
        assert 0 < lost_metrics and recovery.rows["metrics"] == 1200 - lost_metrics
        new = store.add(parse_spec({"owner": "user0"}))
        assert new.seq > max(j.seq for j in listed), "a new job gets a fresh number"
    finally:
        store.close()


def test_a_file_whose_first_page_is_damaged_recovers_nothing_and_writes_nothing(tmp_path):
    _store_with_jobs(tmp_path / "live.sqlite3", 5)
    damaged = tmp_path / "snapshot.sqlite3"
    backup_store(tmp_path / "live.sqlite3", damaged)
    with open(damaged, "r+b") as fh:
        fh.write(random.Random(1).randbytes(PAGE))
    recovery = recover_database(damaged, tmp_path / "recovered.sqlite3")
    assert recovery.error and not (tmp_path / "recovered.sqlite3").exists()
    assert not [p.name for p in tmp_path.iterdir() if "recover" in p.name], "no half file left either"
