"""Uploads are fair: two checks at once per person (the rest wait their turn), a Space-wide cap from the memory, a
quota on each person's kept bytes with a list and a Delete to free it, and identical uploads at once all kept."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from backend.api.guards import UPLOAD_CHECKS, build
from backend.core.users import User
from backend.data import uploads as upload_module
from backend.data.upload_store import size_text, upload_quota
from backend.platform.limits import Busy, InFlight
from tests.helpers import tiny_spec
from tests.unit.api.test_access import CHAT_ROWS, files_under, refused, write_jsonl

ANN, BEN = User("ann"), User("ben")


def temp_copy(tmp_path: Path, name: str = "chats.jsonl", rows: list[dict] | None = None, folder: str = "f00d") -> Path:
    """What the web server hands a request: its temporary copy of the uploaded file."""
    return write_jsonl(tmp_path / "gradio" / folder / name, rows or CHAT_ROWS)


class GatedChecks:
    """Stands in for the check's child process: each check waits for its own gate, and the most at once is kept."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.peak = 0
        self.gates: list[threading.Event] = []

    def __call__(self, upload_id, display, method, uploads_dir, columns):
        gate = threading.Event()
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.gates.append(gate)
        try:
            assert gate.wait(20), "a test gate was never opened"
            return f"{display}: 12 rows"
        finally:
            with self.lock:
                self.running -= 1

    def started(self) -> int:
        with self.lock:
            return len(self.gates)

    def open(self, index: int) -> None:
        self.gates[index].set()

    def open_all(self) -> None:
        with self.lock:
            for gate in self.gates:
                gate.set()


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- at most two checks at once per person ------------------------------------------------------------------------


def test_a_third_upload_of_one_person_waits_for_a_free_check_and_another_person_goes_ahead(api, tmp_path, monkeypatch):
    checks = GatedChecks()
    monkeypatch.setattr(upload_module, "_checked", checks)
    told: list[str] = []
    with ThreadPoolExecutor(4) as pool:
        ann = [
            pool.submit(
                api.datasets.upload_dataset,
                temp_copy(tmp_path, folder=f"a{i}"),
                "chats.jsonl",
                "sft",
                ANN,
                None,
                told.append,
            )
            for i in range(3)
        ]
        wait_until(lambda: checks.started() == 2 and told)
        assert told == ["upload check: waiting for your other 2 to end (one person may run that many at once)"]
        ben = pool.submit(api.datasets.upload_dataset, temp_copy(tmp_path, folder="b"), "chats.jsonl", "sft", BEN)
        wait_until(lambda: checks.started() == 3)  # ben's check starts while ann's third waits
        assert api.datasets._upload_checks.in_flight("ann") == 2 and not any(f.done() for f in ann)
        waited = time.monotonic()
        checks.open(0)  # one of ann's ends: her third starts
        wait_until(lambda: checks.started() == 4)
        print(f"\nann's third started {time.monotonic() - waited:.3f} s after her first check ended")
        checks.open_all()
        kept = [f.result(timeout=10) for f in [*ann, ben]]
    assert checks.peak == 3  # ann's two and ben's one, never ann's three
    assert len({upload_id for upload_id, _ in kept}) == 4


def test_checking_a_kept_upload_again_counts_among_the_persons_checks(api, tmp_path, monkeypatch):
    # the real check
    kept, _ = api.datasets.upload_dataset(temp_copy(tmp_path, folder="kept"), "chats.jsonl", "sft", ANN)
    checks = GatedChecks()
    monkeypatch.setattr(upload_module, "_checked", checks)
    told: list[str] = []
    with ThreadPoolExecutor(3) as pool:
        running = [
            pool.submit(api.datasets.upload_dataset, temp_copy(tmp_path, folder=f"a{i}"), "c.jsonl", "sft", ANN)
            for i in range(2)
        ]
        wait_until(lambda: checks.started() == 2)
        again = pool.submit(api.datasets.check_upload, kept, "sft", None, ANN, told.append)
        wait_until(lambda: bool(told))
        assert checks.started() == 2 and "waiting for your other 2" in told[0]
        checks.open_all()
        wait_until(lambda: checks.started() == 3)
        checks.open_all()
        assert again.result(timeout=10) == "chats.jsonl: 12 rows"
        [f.result(timeout=10) for f in running]


def test_an_upload_that_would_wait_too_long_is_refused_with_a_sentence_and_keeps_nothing(api, tmp_path, monkeypatch):
    checks = GatedChecks()
    monkeypatch.setattr(upload_module, "_checked", checks)
    monkeypatch.setattr("backend.api.datasets.UPLOAD_CHECK_WAIT_S", 0.3)
    with ThreadPoolExecutor(2) as pool:
        running = [
            pool.submit(api.datasets.upload_dataset, temp_copy(tmp_path, folder=f"a{i}"), "c.jsonl", "sft", ANN)
            for i in range(2)
        ]
        wait_until(lambda: checks.started() == 2)
        third = temp_copy(tmp_path, folder="third")
        refused(
            lambda: api.datasets.upload_dataset(third, "chats.jsonl", "sft", ANN),
            "upload check: your other 2 still run after 0.3 s of waiting, and one person may have 2 at once; try again",
        )
        assert not third.exists(), "the web server's copy of a refused upload is removed"
        checks.open_all()
        [f.result(timeout=10) for f in running]
    assert len(api.datasets.list_uploads(ANN).uploads) == 2


def test_the_space_wide_cap_comes_from_the_memory_and_a_check_over_it_waits(monkeypatch):
    gib = 2**30
    assert build(UPLOAD_CHECKS, room=16 * gib).total == 6  # 2.375 GiB a check: six fit in a 16 GB Space
    assert build(UPLOAD_CHECKS, room=1 * gib).total == 1  # at least one, however little is left
    monkeypatch.setenv("STUDIO_MAX_UPLOAD_CHECKS", "3")
    assert build(UPLOAD_CHECKS, room=64 * gib).total == 3
    slots = InFlight("upload check", 2, 1, "STUDIO_MAX_UPLOAD_CHECKS")
    release = slots.hold("ann")
    with pytest.raises(Busy, match=r"this Space is running 1 at once after 0.2 s of waiting, the most it allows"):
        slots.hold("ben", wait_s=0.2)
    threading.Timer(0.2, release).start()
    told: list[str] = []
    slots.hold("ben", wait_s=5, on_wait=told.append)()
    assert told == ["upload check: waiting for a free slot (1 may run at once on this Space)"]


# --- identical uploads at once -----------------------------------------------------------------------------------


def test_an_identical_upload_that_starts_after_the_first_ended_still_finds_the_shared_file(api, tmp_path, monkeypatch):
    """Gradio keeps identical uploads at one path: the first check to end must not remove it from the others."""
    checks = GatedChecks()
    monkeypatch.setattr(upload_module, "_checked", checks)
    shared = temp_copy(tmp_path, folder="same-hash")
    with ThreadPoolExecutor(3) as pool:
        first, second = (pool.submit(api.datasets.upload_dataset, shared, "chats.jsonl", "sft", ANN) for _ in range(2))
        wait_until(lambda: checks.started() == 2)
        checks.open(0)
        wait_until(lambda: first.done() or second.done())
        assert shared.exists(), "another request still checks it"
        third = pool.submit(
            api.datasets.upload_dataset, shared, "chats.jsonl", "sft", ANN
        )  # queued behind them in Gradio
        wait_until(lambda: checks.started() == 3)
        checks.open_all()
        kept = [f.result(timeout=10) for f in (first, second, third)]
    assert len({upload_id for upload_id, _ in kept}) == 3
    assert not shared.exists() and not shared.parent.exists(), "removed once the last check of it ended"


def test_an_upload_whose_temporary_copy_is_gone_is_a_sentence(api, tmp_path):
    refused(
        lambda: api.datasets.upload_dataset(tmp_path / "gradio" / "f00d" / "gone.jsonl", "gone.jsonl", "sft", ANN),
        "dataset: gone.jsonl is no longer on the server (its temporary copy is gone); upload it again",
    )


# --- the quota on kept bytes, the list and Delete ------------------------------------------------------------------


def test_an_upload_past_the_quota_is_refused_with_what_is_used_and_how_to_free_it_and_delete_frees_it(
    api, paths, tmp_path, monkeypatch
):
    monkeypatch.setenv("STUDIO_UPLOAD_QUOTA_MB", "1")
    rows = [{"text": "x" * 500 + str(i)} for i in range(1200)]  # about 0.6 MB: one fits in 1 MB, two do not
    first, _ = api.datasets.upload_dataset(temp_copy(tmp_path, "a.jsonl", rows, "a"), "a.jsonl", "sft", ANN)
    before = files_under(paths.root)
    source = temp_copy(tmp_path, "b.jsonl", [*rows, {"text": "more"}], "b")
    kept = size_text((paths.uploads("ann") / first).stat().st_size)
    refused(
        lambda: api.datasets.upload_dataset(source, "b.jsonl", "sft", ANN),
        f"dataset: b.jsonl ({size_text(source.stat().st_size)}) does not fit in your upload quota: your uploads take "
        f"{kept} of the 1 MB each person may keep here (STUDIO_UPLOAD_QUOTA_MB); delete uploads you no longer need in "
        "the Train tab's Dataset section (Your uploads), then upload it again",
    )
    assert files_under(paths.root) == before and not source.exists(), "nothing stored, the temporary copy removed"
    assert api.datasets.list_uploads(BEN).uploads == [], "the quota and the list are each person's own"
    refused(lambda: api.datasets.delete_upload(first, BEN), f"dataset.name: there is no upload '{first}' of yours")
    shelf = api.datasets.list_uploads(ANN)
    assert [u.upload_id for u in shelf.uploads] == [first]
    assert shelf.describe() == f"1 upload, {kept} of your 1 MB quota"
    assert api.datasets.delete_upload(first, ANN).name == "a.jsonl"
    assert api.datasets.list_uploads(ANN).uploads == []
    api.datasets.upload_dataset(temp_copy(tmp_path, "b.jsonl", [*rows, {"text": "more"}], "b"), "b.jsonl", "sft", ANN)


def test_the_quota_is_two_gigabytes_on_a_space_and_none_locally_unless_set(monkeypatch):
    monkeypatch.delenv("STUDIO_UPLOAD_QUOTA_MB", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert upload_quota() is None
    monkeypatch.setenv("SPACE_ID", "someone/studio")
    assert upload_quota() == 2048 * 2**20
    monkeypatch.setenv("STUDIO_UPLOAD_QUOTA_MB", "100")
    assert upload_quota() == 100 * 2**20


def test_two_uploads_at_once_cannot_both_take_the_last_room(api, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_UPLOAD_QUOTA_MB", "1")
    checks = GatedChecks()
    monkeypatch.setattr(upload_module, "_checked", checks)
    rows = [{"text": "x" * 500 + str(i)} for i in range(1200)]  # about 0.6 MB: one fits, two do not
    with ThreadPoolExecutor(1) as pool:
        checking = temp_copy(tmp_path, "a.jsonl", rows, "a")
        first = pool.submit(api.datasets.upload_dataset, checking, "a.jsonl", "sft", ANN)
        wait_until(lambda: checks.started() == 1)
        refused(
            lambda: api.datasets.upload_dataset(temp_copy(tmp_path, "b.jsonl", rows, "b"), "b.jsonl", "sft", ANN),
            f"does not fit in your upload quota: your uploads take {size_text(checking.stat().st_size)} of the 1 MB",
        )
        checks.open_all()
        first.result(timeout=10)


def test_an_upload_a_queued_job_reads_is_not_deleted(api, tmp_path):
    upload_id, _ = api.datasets.upload_dataset(temp_copy(tmp_path), "chats.jsonl", "sft", ANN)
    job = api.jobs.submit(tiny_spec(dataset={"source": "upload", "name": upload_id}), user=ANN).job
    refused(
        lambda: api.datasets.delete_upload(upload_id, ANN),
        f"dataset: chats.jsonl is read by job {job.id}, which is queued; cancel it or let it finish",
    )
    api.jobs.cancel(job.id, user=ANN)
    api.datasets.delete_upload(upload_id, ANN)
    assert api.datasets.list_uploads(ANN).uploads == []


# --- the app on a Space ----------------------------------------------------------------------------------------------


def outcome(job):
    """A gradio_client job's answer, or the error it ended with."""
    try:
        return job.result(timeout=240)
    except Exception as exc:  # noqa: BLE001 - a refused upload is an answer here
        return exc


@pytest.mark.slow
def test_twelve_identical_uploads_at_once_on_a_space_are_kept_then_listed_and_deleted(tmp_path, models_dir):
    from gradio_client import handle_file

    from backend.core.uploads import is_upload_id
    from tests.helpers.apps import data_dir_with_models, launch_app

    rows = write_jsonl(tmp_path / "chats.jsonl", CHAT_ROWS)
    root = data_dir_with_models(tmp_path / "data", models_dir)
    with launch_app(root, space=True) as app:
        client = app.client("ann")
        started = time.monotonic()
        jobs = [client.submit(handle_file(str(rows)), "sft", api_name="/upload_dataset") for _ in range(12)]
        told = set()  # what the waiting ones were told (gr.Info), while they waited
        while not all(job.done() for job in jobs) and time.monotonic() - started < 240:
            told |= {job.status().log[0] for job in jobs if job.status().log}
            time.sleep(0.05)
        answers = [outcome(job) for job in jobs]
        took = time.monotonic() - started
        # The Train tab's "Your uploads" panel lists them and deletes one (its Delete forgets it in the form too).
        summary, _, _ = client.predict(api_name="/list_uploads")
        kept = answers[0][0] if not isinstance(answers[0], Exception) else ""
        after = client.predict(kept, kept, api_name="/delete_upload")
    failed = [a for a in answers if isinstance(a, Exception) or not is_upload_id(a[0])]
    print(f"\n12 identical uploads at once: {len(failed)} failed, {took:.1f} s in all")
    assert not failed, failed[:2]
    assert len({a[0] for a in answers}) == 12 and all("12 rows" in a[1]["value"] for a in answers)
    assert told == {"upload check: waiting for your other 2 to end (one person may run that many at once)"}, told
    assert summary.startswith("12 uploads, ") and summary.endswith(" of your 2,048 MB quota"), summary
    assert after[0].startswith("11 uploads, ") and after[2].startswith("Deleted chats.jsonl (") and after[3] == ""
    assert len(list((root / "uploads").glob("*/*.jsonl"))) == 11
