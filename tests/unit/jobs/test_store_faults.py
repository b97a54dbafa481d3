"""A store no input can poison: unreadable rows, damaged files and racing submitters, each through the real entry
points (the store, the facade, ``python -m backend`` and ``python app.py`` in subprocesses)."""

import multiprocessing
import random
import sqlite3
import threading

import pytest

from backend.api import StudioAPI
from backend.core.spec import SpecError, parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.jobs.store_errors import QuotaExceeded, StoreCorrupt, UnreadableJob
from tests.helpers import cli, tiny_spec

OWNERS = ("alice", "bob", "carol")
LIMIT = 3


def _spec(owner="local"):
    return parse_spec({"owner": owner, "training": {"max_steps": 3}})


def _overwrite(store, job_id, column, value):
    """Write a raw column value, as an older version of the app or a hand edit would have."""
    con = sqlite3.connect(store.db_path)
    con.execute(f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, job_id))
    con.commit()
    con.close()


# What the previous version stored for `training.epochs: Infinity`: pydantic writes a non-finite float as null.
POISONED_SPEC = _spec().to_json().replace('"epochs":1.0', '"epochs":null')


def test_unreadable_rows_are_skipped_named_and_explained(store):
    first, poisoned, garbled, odd_status, last = (store.add(_spec()) for _ in range(5))
    _overwrite(store, poisoned.id, "spec", POISONED_SPEC)
    _overwrite(store, garbled.id, "spec", "{not json")
    _overwrite(store, odd_status.id, "status", "paused")

    assert [j.id for j in store.list()] == [first.id, last.id]
    unreadable = dict(store.unreadable_rows())
    assert list(unreadable) == [poisoned.id, garbled.id, odd_status.id]
    assert unreadable[poisoned.id] == "its spec is not valid: training.epochs: Input should be a valid number"
    assert unreadable[garbled.id].startswith("its spec is not valid: spec: Invalid JSON")
    assert unreadable[odd_status.id] == "its status 'paused' is unknown"
    with pytest.raises(UnreadableJob) as err:
        store.get(poisoned.id)
    assert str(err.value).startswith(f"job {poisoned.id} cannot be read (its spec is not valid: training.epochs")
    assert "left out of job lists" in str(err.value)


def test_an_unreadable_queued_row_is_failed_with_its_reason_and_the_queue_moves_on(store):
    poisoned, good = store.add(_spec()), store.add(_spec())
    _overwrite(store, poisoned.id, "spec", POISONED_SPEC)
    claimed = store.claim_next()
    assert claimed.id == good.id and claimed.status is JobStatus.running
    assert store.claim_next() is None
    con = sqlite3.connect(store.db_path)
    status, error = con.execute("SELECT status, error FROM jobs WHERE id = ?", (poisoned.id,)).fetchone()
    con.close()
    assert status == "failed" and error.startswith(f"job {poisoned.id} cannot be read (its spec is not valid")


def test_an_old_poisoned_row_does_not_take_down_the_cli_or_the_facade(paths):
    store = JobStore(paths.db)
    readable = store.add(_spec())
    _overwrite(store, store.add(_spec()).id, "spec", POISONED_SPEC)
    listed = cli("list", timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert readable.id in listed.stdout
    assert "warning: 1 job row(s) could not be read and are not listed" in listed.stderr
    assert "training.epochs: Input should be a valid number" in listed.stderr and "Traceback" not in listed.stderr
    api = StudioAPI(paths.root, scheduler="none")
    assert api.jobs.submit(tiny_spec()).job.status is JobStatus.queued, "a later submit still works"
    assert len(api.jobs.list_jobs()) == 2 and len(api.jobs.unreadable_jobs()) == 1


def test_a_non_finite_spec_file_is_refused_and_the_list_still_works(data_dir, tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("training:\n  epochs: .inf\ngrpo:\n  beta: .nan\n")
    refused = cli("submit", str(spec_file), timeout=60)
    assert refused.returncode == 2
    assert "training.epochs: must be a finite number (got inf)" in refused.stderr
    assert "grpo.beta: must be a finite number (got nan)" in refused.stderr
    listed = cli("list", "--json", timeout=60)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]" and listed.stderr == ""


# --- damaged files ------------------------------------------------------------------------------------
def _damaged_database(path):
    """A real store with several jobs and their metrics, then random bytes over pages in the middle of the file."""
    store = JobStore(path)
    for _ in range(12):
        job = store.add(_spec())
        store.report(job.id, [(step, 0.0, {"loss": 1.0, "note": "x" * 200}) for step in range(40)], None)
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file, so the damage hits real pages
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    size = path.stat().st_size
    assert size >= 8 * page_size, "several pages, so the middle is not the header"
    with open(path, "r+b") as fh:
        fh.seek(size // 2 // page_size * page_size)
        fh.write(random.Random(7).randbytes(2 * page_size))
    return path


def _not_sqlite(path):
    path.write_text("these are my notes, not a database\n" * 100)
    return path


@pytest.mark.parametrize("damage", [_damaged_database, _not_sqlite])
def test_a_damaged_store_is_refused_at_start_with_what_to_do(tmp_path, damage):
    db = damage(tmp_path / "studio.sqlite3")
    with pytest.raises(StoreCorrupt) as err:
        JobStore(db)
    message = str(err.value)
    assert message.startswith(f"The job store {db} is damaged or is not a SQLite database (")
    assert "move that file aside" in message and "a fresh, empty store is created" in message
    assert "\n" not in message


@pytest.mark.parametrize("damage", [_damaged_database, _not_sqlite])
def test_the_cli_says_the_store_is_damaged_and_exits_2(data_dir, damage):
    db = damage(data_dir / "studio.sqlite3")
    for args in (["list"], ["show", "20260101-000000-abcdef"]):
        result = cli(*args, timeout=60)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"error: The job store {db} is damaged or is not a SQLite database")
        assert "Traceback" not in result.stderr


def test_the_app_says_the_store_is_damaged_and_exits_2(data_dir, capsys, monkeypatch):
    import app  # in this process: a subprocess would pay gradio's import again for one line of output

    def launch_refused(api):
        raise AssertionError("the app went on to build its UI on a damaged store")

    monkeypatch.setattr(app, "build_app", launch_refused)  # a missed check fails here instead of serving forever
    db = _damaged_database(data_dir / "studio.sqlite3")
    with pytest.raises(SystemExit) as exited:
        app.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"The job store {db} is damaged or is not a SQLite database")


# --- racing submitters --------------------------------------------------------------------------------
def _submit_in_threads(db_path, start, threads_per_process, first_owner):
    """One submitting process: threads that each try to queue one job at the same moment."""
    store = JobStore(db_path)
    barrier = threading.Barrier(threads_per_process)
    failures = []

    def submit(i):
        barrier.wait()
        try:
            store.add(_spec(OWNERS[(first_owner + i) % len(OWNERS)]), max_queued_for_owner=LIMIT)
        except QuotaExceeded:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported through the exit code
            failures.append(exc)

    start.wait()
    workers = [threading.Thread(target=submit, args=(i,)) for i in range(threads_per_process)]
    [w.start() for w in workers]
    [w.join() for w in workers]
    if failures:
        raise failures[0]


def test_processes_and_threads_racing_never_pass_the_per_user_limit(tmp_path):
    db = tmp_path / "studio.sqlite3"
    JobStore(db)
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter each: no inherited connections or locks
    processes, threads_each = 3, 8
    start = spawn.Barrier(processes)
    children = [spawn.Process(target=_submit_in_threads, args=(db, start, threads_each, p)) for p in range(processes)]
    [c.start() for c in children]
    [c.join(120) for c in children]
    assert [c.exitcode for c in children] == [0] * processes
    store = JobStore(db)
    assert {o: len(store.list(owner=o, statuses=[JobStatus.queued])) for o in OWNERS} == {o: LIMIT for o in OWNERS}


def test_concurrent_submits_through_the_facade_respect_the_limit(paths, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", str(LIMIT))
    api = StudioAPI(paths.root, scheduler="none")
    barrier = threading.Barrier(20)
    refused, unexpected = [], []

    def submit(i):
        barrier.wait()
        try:
            # Each thread its own spec: one spec twice from one user would be one job (queue once).
            api.jobs.submit(tiny_spec(training={"seed": i}), user=User(OWNERS[i % len(OWNERS)]))
        except SpecError as exc:  # QuotaExceeded is one, and what a user sees either way
            refused.append(exc)
        except BaseException as exc:  # noqa: BLE001
            unexpected.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(20)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert unexpected == []
    assert {o: len(api.jobs.list_jobs(user=User(o))) for o in OWNERS} == {o: LIMIT for o in OWNERS}
    assert len(refused) == 20 - LIMIT * len(OWNERS) and all(isinstance(e, QuotaExceeded) for e in refused)
    api.jobs.submit(tiny_spec(), user=User("admin", is_admin=True))  # an admin is never capped
