"""A damaged snapshot of the store is never total loss (issue 36): it is set aside under a name of its own before
anything is written over it, its rows are recovered into the new store, and the header and ``status`` name it and say
how many jobs came back. The damage is real: pages of a real store overwritten with random bytes."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.cli import main
from backend.core.spec import parse_spec
from backend.jobs.store import JobStore
from backend.platform.mirror import Mirror, backup_store, snapshot_ok
from backend.platform.sqlite_recovery import recover_database
from backend.platform.storage import DB_NAME, StorageError
from tests.unit.platform.test_storage import network_world

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


def test_rows_below_a_damaged_interior_page_are_read_off_their_leaf_pages(tmp_path):
    made = _store_with_jobs(tmp_path / "live.sqlite3", 120)
    deleted = list(made)[6:12]  # whole leaf pages among them: they go to the freelist, rows and all
    con = sqlite3.connect(tmp_path / "live.sqlite3")
    con.execute("PRAGMA secure_delete = OFF")  # as most builds do: a freed page keeps its old rows
    con.executemany("DELETE FROM jobs WHERE id = ?", [(job_id,) for job_id in deleted])
    con.commit()
    con.close()
    for job_id in deleted:
        del made[job_id]
    damaged = tmp_path / "snapshot.sqlite3"
    backup_store(tmp_path / "live.sqlite3", damaged)
    con = sqlite3.connect(damaged)
    (root,) = [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name = 'jobs' AND pagetype = 'internal'")]
    con.close()
    with open(damaged, "r+b") as fh:  # the table's only interior page: every leaf is out of SQLite's reach
        fh.seek((root - 1) * PAGE)
        fh.write(random.Random(4).randbytes(PAGE))
    recovery = recover_database(damaged, tmp_path / "recovered.sqlite3")
    assert recovery.error is None and recovery.from_pages == len(made) == 114
    store = JobStore(tmp_path / "recovered.sqlite3")
    try:
        listed = store.list()
        assert sorted(j.id for j in listed) == sorted(made), "every job, and none of the deleted ones"
        for job in listed:
            assert (job.owner, job.spec) == (made[job.id]["owner"], made[job.id]["spec"])
        assert recovery.rows["metrics"] == 1200, "the other tables, read by SQLite, are whole"
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


def test_a_damaged_snapshot_is_set_aside_recovered_and_named_never_overwritten(
    tmp_path, models_dir, monkeypatch, capsys
):
    data, local = network_world(tmp_path, models_dir, monkeypatch)
    api = StudioAPI(scheduler="none")
    ids = [api.jobs.submit({"owner": "local", "training": {"max_steps": 2 + i}}).job.id for i in range(60)]
    api.close()
    assert Mirror(local, data, interval_s=60).sync()
    lost = _damage(data / DB_NAME, 3, seed=3)
    damaged_bytes = _digest(data / DB_NAME)
    shutil.rmtree(local)  # a fresh machine (a Space restart): its own disk is empty
    local.mkdir()
    (local / "models").symlink_to(models_dir, target_is_directory=True)

    api = StudioAPI(scheduler="none")  # restores before it opens the store
    try:
        (aside,) = [p for p in data.iterdir() if p.name.startswith(f"{DB_NAME}.damaged-") and p.suffix != ".txt"]
        assert _digest(aside) == damaged_bytes, "set aside whole, before anything was written"
        recovered = [j.id for j in api.jobs.list_jobs()]
        assert 0 < lost and len(recovered) == 60 - lost and set(recovered) <= set(ids)
        notice = api.storage_notice()
        assert str(aside) in notice and f"{len(recovered)} jobs and" in notice and "were recovered" in notice
        assert api.storage_status()["set_aside"] == [notice]
        api.jobs.submit({"owner": "local", "training": {"max_steps": 1}})
        mirror = Mirror(local, data, interval_s=60)
        assert mirror.sync() and mirror.sync(force=True)
        assert snapshot_ok(data / DB_NAME) is None, "the new snapshot is the recovered store, sound"
        assert _digest(aside) == damaged_bytes, "the mirror leaves the set-aside file alone"
        assert not any(p.name.startswith(f"{DB_NAME}.damaged-") for p in local.iterdir()), "and does not copy it"
    finally:
        api.close()

    assert main(["status"]) == 0  # another process, later: the status still names it and the count
    printed = capsys.readouterr().out
    assert str(aside) in printed and f"{len(recovered)} jobs and" in printed

    shutil.rmtree(local)  # the next restart restores the new snapshot: nothing recovered is lost again
    local.mkdir()
    (local / "models").symlink_to(models_dir, target_is_directory=True)
    api = StudioAPI(scheduler="none")
    try:
        assert len(api.jobs.list_jobs()) == len(recovered) + 1
        assert str(aside) in (api.storage_notice() or ""), "named until someone deletes it"
        assert _digest(aside) == damaged_bytes
    finally:
        api.close()


def test_a_damaged_snapshot_older_than_the_local_store_is_set_aside_and_the_local_store_kept(
    tmp_path, models_dir, monkeypatch
):
    data, local = network_world(tmp_path, models_dir, monkeypatch)
    api = StudioAPI(scheduler="none")
    kept = api.jobs.submit({"owner": "local", "training": {"max_steps": 2}}).job.id
    api.close()
    assert Mirror(local, data, interval_s=60).sync()
    _damage(data / DB_NAME, 1, seed=5)
    damaged_bytes = _digest(data / DB_NAME)
    for name in (DB_NAME, f"{DB_NAME}-wal"):  # the local store is older than the snapshot: restore reads it
        if (local / name).exists():
            os.utime(local / name, (1_000_000, 1_000_000))
    api = StudioAPI(scheduler="none")
    try:
        (aside,) = [p for p in data.iterdir() if p.name.startswith(f"{DB_NAME}.damaged-") and p.suffix != ".txt"]
        assert _digest(aside) == damaged_bytes and not (data / DB_NAME).exists()
        assert [j.id for j in api.jobs.list_jobs()] == [kept]
        assert "goes on with the store on local disk" in api.storage_notice()
    finally:
        api.close()


def test_a_damaged_snapshot_that_cannot_be_set_aside_stops_the_start_and_stays(tmp_path, models_dir, monkeypatch):
    data, local = network_world(tmp_path, models_dir, monkeypatch)
    api = StudioAPI(scheduler="none")
    api.jobs.submit({"owner": "local", "training": {"max_steps": 2}})
    api.close()
    assert Mirror(local, data, interval_s=60).sync()
    _damage(data / DB_NAME, 1, seed=6)
    damaged_bytes = _digest(data / DB_NAME)
    shutil.rmtree(local)
    local.mkdir()

    def refuse(source, target):
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr("backend.platform.snapshot_rescue.os.replace", refuse)
    with pytest.raises(StorageError, match="could not be set aside .* does not start rather than write over it"):
        StudioAPI(scheduler="none")
    assert _digest(data / DB_NAME) == damaged_bytes
