"""Hostile numbers, names, uploads, full and read-only disks at the facade and in the files it writes, in this process
as they would be in the app's (the app as a process: test_bad_inputs.py).

Each case asserts a sentence (a SpecError or ValueError whose text names what to fix), nothing stored or left behind,
and that the next good request still works; and for every case, another user's job list answering within 2 s all
through it and its peak memory adding under 512 MB (``others_still_answer``).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from backend.api import SpecError, StudioAPI
from backend.chat.feedback import export_feedback, feedback_log
from backend.chat.feedback_log import NotSaved
from backend.core.paths import USER_LAYOUT_MARKER, DataPaths
from backend.core.spec import Method
from backend.core.users import User
from backend.data import upload_limits, uploads
from backend.data.uploads import keep_upload
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.jobs.store_errors import QueueFull
from backend.models.mixed_batch import GenerationSettings
from backend.platform.limits import Busy
from tests.helpers import ROOT, tiny_spec, wait_for
from tests.helpers.faults import fill, read_only, timed_all_through, tmpfs
from tests.unit.api.test_access import CHAT_ROWS, uploaded, write_jsonl

OTHERS_WAIT_S = 2.0  # another user's job list answers within this, all through each case
CASE_MEMORY_BYTES = 512 * 2**20  # what a case's peak may add to the process's resident memory


def _resident() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, in bytes."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            found[line.split(":")[0]] = int(line.split()[1]) * 1024
    return found["VmRSS"], found["VmHWM"]


@pytest.fixture(autouse=True)
def others_still_answer(request, tmp_path):
    """Every case here runs in this process, as it would in the app's: another user's job list (read from the
    case's data dir when it has one) answers within 2 s all through the case, and the case's peak adds under
    512 MB to the process's resident memory (the peak is reset first: /proc/self/clear_refs)."""
    root = request.getfixturevalue("data_dir") if "data_dir" in request.fixturenames else tmp_path / "others"
    root.mkdir(parents=True, exist_ok=True)
    others = JobStore(DataPaths(root).db)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    resident_before = _resident()[0]
    with timed_all_through(lambda: others.list(owner="bob")) as waits:
        yield
    others.close()
    assert waits and max(waits) < OTHERS_WAIT_S, f"another user's job list took {max(waits or [0]):.1f} s"
    added = _resident()[1] - resident_before
    assert added < CASE_MEMORY_BYTES, f"the case's peak added {added / 2**20:.0f} MB"


# (case id, call on (api, job id), a piece of the sentence)
NUMBER_CASES = [
    ("cursor-past-sqlite", lambda api, j: api.jobs.metrics_since(j, 2**63), "metrics cursor"),
    ("cursor-huge", lambda api, j: api.jobs.metrics_since(j, 10**30), "metrics cursor"),
    ("cursor-negative", lambda api, j: api.jobs.metrics_since(j, -1), "metrics cursor"),
    ("cursor-float", lambda api, j: api.jobs.metrics_since(j, 1.5), "metrics cursor"),
    ("cursor-nan", lambda api, j: api.jobs.metrics_since(j, float("nan")), "metrics cursor"),
    ("cursor-string", lambda api, j: api.jobs.metrics_since(j, "0; DROP TABLE jobs"), "metrics cursor"),
    ("cursor-bool", lambda api, j: api.jobs.metrics(j, True), "metrics cursor"),
    ("log-lines-huge", lambda api, j: api.jobs.log_tail(j, 10**12), "log lines"),
    ("log-lines-zero", lambda api, j: api.jobs.log_tail(j, 0), "log lines"),
    ("log-lines-negative", lambda api, j: api.jobs.log_tail(j, -5), "log lines"),
    ("preview-rows-huge", lambda api, j: api.datasets.preview(tiny_spec(), rows=10**9), "preview rows"),
    ("dry-run-row-huge", lambda api, j: api.environments.dry_run(tiny_spec(), row=2**64), "dry run's row"),
    ("dry-run-seed-negative", lambda api, j: api.environments.dry_run(tiny_spec(), seed=-1), "dry run's seed"),
    ("warm-up-rows-huge", lambda api, j: api.environments.warm_up(tiny_spec(), rows=10**6), "warm-up's rows"),
]


@pytest.fixture()
def api_with_a_job(api):
    job = api.jobs.submit(tiny_spec(), "alice").job
    return api, job.id


@pytest.mark.parametrize("call,expected", [c[1:] for c in NUMBER_CASES], ids=[c[0] for c in NUMBER_CASES])
def test_an_out_of_range_number_at_the_facade_is_a_sentence(api_with_a_job, call, expected):
    api, job_id = api_with_a_job
    with pytest.raises(SpecError) as refused:
        call(api, job_id)
    sentence = str(refused.value)
    assert expected in sentence and "whole number" in sentence and len(sentence) < 200, sentence
    assert [j.id for j in api.jobs.list_jobs()] == [job_id]  # nothing stored
    assert api.jobs.metrics_since(job_id, 0).cursor == 0  # and the next good request answers


# --- feedback on a full disk: every row is all or nothing --------------------------------------------------------


def _asked(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def test_a_thumb_on_a_full_disk_is_refused_with_a_sentence_and_leaves_the_log_as_it_was(paths):
    thumbs = feedback_log(paths, "alice", "kto")
    with tmpfs(thumbs.path.parent, "1m"):
        thumbs.record(_asked("2 + 2?"), "2 + 2 = \\boxed{4}", True, "tuned", None)
        before = thumbs.path.read_bytes()
        filler = fill(thumbs.path.parent)
        # Longer than the slack in the log's last page: the old code wrote part of it, then failed.
        for answer, label in (("x" * 20_000, True), ("2 + 2 = \\boxed{4}", False)):  # an append, then a rewrite
            with pytest.raises(NotSaved) as refused:
                thumbs.record(_asked("2 + 2?"), answer, label, "tuned", None)
            assert (
                str(refused.value) == "not saved: the disk that holds the studio’s data is full; free some "
                "space and try again"
            )
            assert thumbs.path.read_bytes() == before
        assert sorted(p.name for p in thumbs.path.parent.iterdir()) == ["alice.jsonl", "filler"]  # no temp file
        filler.unlink()
        thumbs.record(_asked("3 + 3?"), "3 + 3 = \\boxed{6}", True, "tuned", None)
        rows = thumbs.rows()
        assert [r["completion"][0]["content"] for r in rows] == ["2 + 2 = \\boxed{4}", "3 + 3 = \\boxed{6}"]


def test_a_line_torn_by_a_crash_is_set_aside_and_never_merged_with_the_next_row(paths):
    prefs = feedback_log(paths, "alice", "dpo")
    prefs.record(_asked("1 + 1?"), "2", "3", "job-1")
    torn = b'{"prompt": [{"role": "user", "content": "5 + 5?"}], "cho'
    with open(prefs.path, "ab") as fh:
        fh.write(torn)  # a writer killed mid-line
    prefs.record(_asked("4 + 4?"), "8", "9", "job-1")
    assert [r["chosen"][0]["content"] for r in prefs.rows()] == ["2", "8"]
    assert prefs.path.read_bytes().endswith(b"\n") and prefs.path.read_bytes().count(b"\n") == 2
    assert prefs.path.with_name("alice.jsonl.torn").read_bytes() == torn + b"\n"


def test_an_export_on_a_full_disk_is_a_sentence_and_leaves_no_folder_behind(paths):
    feedback_log(paths, "alice", "kto").record(_asked("2 + 2?"), "4", True, "base", None)
    with tmpfs(paths.downloads, "1m"):
        filler = fill(paths.downloads)
        with pytest.raises(NotSaved) as refused:
            export_feedback(paths, "alice", "kto")
        assert "the export was not written: the disk that holds the studio’s data is full" in str(refused.value)
        assert [p.name for p in paths.downloads.iterdir()] == ["filler"]
        filler.unlink()
        exported = export_feedback(paths, "alice", "kto")
        assert exported.read_text().count("\n") == 1


def test_an_empty_export_leaves_no_folder_behind(paths):
    with pytest.raises(ValueError, match="no thumbs recorded yet"):
        export_feedback(paths, "alice", "kto")
    assert not paths.downloads.exists() or not any(paths.downloads.iterdir())


# --- one folder per user ----------------------------------------------------------------------------------------

TWINS = [("ada lovelace", "ada_lovelace"), ("zoë", "zoé"), ("..", "__"), ("a.b", "a_b"), ("ë" * 96, "ë" * 95 + "e")]


@pytest.mark.parametrize(
    "first,second", TWINS, ids=["space-underscore", "non-ascii", "dots", "dot-underscore", "very-long"]
)
def test_two_names_never_share_a_folder_nor_an_upload(data_dir, tmp_path, first, second):
    api = StudioAPI(data_dir, scheduler="none")
    try:
        one, two = User(first), User(second)
        upload_id = uploaded(api, one, tmp_path)
        assert api.chat.preference_log(one).path != api.chat.preference_log(two).path
        assert api.chat.thumb_log(one).path.parent == api.core.paths.root / "thumbs"
        assert api.core.paths.uploads(first) != api.core.paths.uploads(second)
        assert api.core.paths.uploads(first).parent == api.core.paths.root / "uploads"
        with pytest.raises(SpecError, match="upload"):
            api.jobs.submit(tiny_spec(dataset={"source": "upload", "name": upload_id}), user=two)
        assert api.jobs.list_jobs() == []
        assert api.jobs.submit(tiny_spec(dataset={"source": "upload", "name": upload_id}), user=one).job.owner == first
    finally:
        api.close()


def test_old_user_folders_move_over_once_at_start_and_a_shared_one_stays_put(data_dir, tmp_path):
    api = StudioAPI(data_dir, scheduler="none")
    paths = api.core.paths
    for owner in ("ada lovelace", "bob", "zoë", "zoé"):
        api.jobs.submit(tiny_spec(), owner)
    api.close()
    # Layout 1: "ada lovelace" -> ada_lovelace, and "zoë" and "zoé" both -> zo_ (whose is it? nobody can say).
    for old in ("ada_lovelace", "bob", "zo_"):
        (paths.root / "uploads" / old).mkdir(parents=True)
        (paths.root / "uploads" / old / "rows.jsonl").write_text(old)
        (paths.root / "thumbs").mkdir(exist_ok=True)
        (paths.root / "thumbs" / f"{old}.jsonl").write_text(old)
    (paths.root / USER_LAYOUT_MARKER).unlink()  # a data dir from before the move
    StudioAPI(data_dir, scheduler="none").close()
    assert (paths.uploads("ada lovelace") / "rows.jsonl").read_text() == "ada_lovelace"
    assert paths.feedback("thumbs", "ada lovelace").read_text() == "ada_lovelace"
    assert (paths.uploads("bob") / "rows.jsonl").read_text() == "bob"  # a plain name keeps its folder
    assert (paths.root / "uploads" / "zo_").is_dir() and not paths.uploads("zoë").exists()
    assert not (paths.root / "uploads" / "ada_lovelace").exists()
    (paths.root / "uploads" / "ada_lovelace").mkdir()  # made after the move: the next start leaves it alone
    StudioAPI(data_dir, scheduler="none").close()
    assert (paths.root / "uploads" / "ada_lovelace").is_dir()


# --- uploads: what a file decodes to, checked where a crash cannot reach the app --------------------------------


def _deep_rows(depth: int = 90_000, rows: int = 12) -> bytes:
    """The issue's file: 12 rows of arrays nested ~90,000 deep (2 MB), which crashed the app's reader (SIGSEGV)."""
    return (b'{"text": ' + b"[" * depth + b"]" * depth + b"}\n") * rows


def _gzip_rows() -> bytes:
    import gzip

    return gzip.compress(b"".join(b'{"text": "%s"}\n' % (b"y" * 1000) for _ in range(2000)))


def _parquet(table_rows: dict) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table(table_rows), sink, compression="zstd")
    return sink.getvalue()


def _parquet_bomb(rows: int = 1500, length: int = 1_000_000) -> bytes:
    """Under 1 KB on disk, 1.5 GB as rows: one long string, dictionary-encoded, in every row (built without ever
    holding the 1.5 GB)."""
    import pyarrow as pa

    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["x" * length]))
    return _parquet({"text": column})


UPLOAD_LIMIT_CASES = [
    ("nested-90000-deep", "deep.jsonl", _deep_rows, "nests values 90,001 levels deep; at most 32"),
    ("nested-33-deep", "deep.json", lambda: b'[{"text": ' + b"[" * 32 + b"]" * 32 + b"}]", "34 levels deep"),
    ("gzip-as-jsonl", "rows.jsonl", _gzip_rows, "is gzip-compressed"),
    ("zstd-as-csv", "rows.csv", lambda: b"\x28\xb5\x2f\xfd" + b"\0" * 64, "is zstd-compressed"),
    # 0.5 KB on disk, 1.5 GB as rows: one long string, dictionary-encoded in every row.
    ("parquet-bomb", "bomb.parquet", _parquet_bomb, "decodes to over 768 MB"),
    ("parquet-rows", "many.parquet", lambda: _parquet({"text": ["a"] * 2_000_001}), "2,000,001 rows"),
    (
        "csv-columns",
        "wide.csv",
        lambda: (",".join(f"c{i}" for i in range(1001)) + "\n" + "1," * 1000 + "1\n").encode(),
        "1,001 columns",
    ),
]


@pytest.mark.parametrize(
    "name,content,expected", [c[1:] for c in UPLOAD_LIMIT_CASES], ids=[c[0] for c in UPLOAD_LIMIT_CASES]
)
def test_an_upload_that_would_decode_past_the_limits_is_refused_and_nothing_is_kept(tmp_path, name, content, expected):
    source = tmp_path / name
    source.write_bytes(content())
    kept = tmp_path / "uploads"
    with pytest.raises(SpecError) as refused:
        keep_upload(source, name, Method.sft, kept)
    assert expected in str(refused.value) and len(str(refused.value)) < 300, str(refused.value)
    assert not kept.exists() or not any(kept.iterdir())
    upload_id, _ = keep_upload(write_jsonl(tmp_path / "ok.jsonl", CHAT_ROWS), "ok.jsonl", Method.sft, kept)
    assert [p.name for p in kept.iterdir()] == [upload_id]  # and the next good upload is kept


@pytest.mark.parametrize(
    "patch,expected",
    [
        # With the depth limit lifted, pyarrow's reader meets the file: a real segfault, in the child.
        ({"MAX_DEPTH": 10**9}, "could not be read safely: the reader crashed on it (signal SIGSEGV)"),
        ({"CHECK_MEMORY_BYTES": 48 * 2**20}, "could not be read safely: it needs more than 48 MB of memory to read"),
        ({"CHECK_SECONDS": 1}, "could not be read safely: reading it took more than 1 s"),
    ],
    ids=["reader-segfault", "memory", "time"],
)
def test_a_check_that_crashes_or_runs_past_its_limits_is_a_sentence_and_the_app_process_lives(
    tmp_path, monkeypatch, patch, expected
):
    if "MAX_DEPTH" in patch:
        source = tmp_path / "big.jsonl"
        source.write_bytes(_deep_rows())
    else:  # 25 MB: seconds to load, and memory
        source = write_jsonl(tmp_path / "big.jsonl", [{"text": f"row {i} " + "z" * 400} for i in range(60_000)])
    for name, value in patch.items():
        monkeypatch.setattr(upload_limits if name.startswith("MAX_") else uploads, name, value)
    kept = tmp_path / "uploads"
    with pytest.raises(SpecError) as refused:
        keep_upload(source, "big.jsonl", Method.sft, kept)
    assert str(refused.value).startswith(f"dataset: big.jsonl {expected}"), str(refused.value)
    assert not any(kept.iterdir())  # neither the file nor its staging folder
    monkeypatch.undo()
    upload_id, _ = keep_upload(write_jsonl(tmp_path / "ok.jsonl", CHAT_ROWS), "ok.jsonl", Method.sft, kept)
    assert [p.name for p in kept.iterdir()] == [upload_id]  # this process lived, and the next upload is kept


# --- limits for the whole Space, beside the per-user ones ---------------------------------------------------------


def test_the_whole_queue_has_a_limit_that_says_which_and_when(data_dir, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_QUEUED_PER_USER", "2")
    monkeypatch.setenv("STUDIO_MAX_QUEUED_TOTAL", "3")
    api = StudioAPI(data_dir, scheduler="none")
    try:
        for seed, name in enumerate(("ann", "ann", "ben")):  # ann's two differ: one spec twice is one job
            api.jobs.submit(tiny_spec(training={"seed": seed}), user=User(name))
        with pytest.raises(QueueFull) as refused:
            api.jobs.submit(tiny_spec(), user=User("cat"))
        assert str(refused.value) == (
            "the queue is full: 3 jobs are waiting, the most this Space holds "
            "(STUDIO_MAX_QUEUED_TOTAL = 3); try again in a few minutes, once some have "
            "started"
        )
        assert len(api.jobs.list_jobs()) == 3
        api.jobs.submit(tiny_spec(), user=User("owner", is_admin=True))  # the Space's owner is not held back
        for job in api.jobs.list_jobs()[:2]:
            api.jobs.cancel(job.id)
        assert api.jobs.submit(tiny_spec(), user=User("cat")).job.owner == "cat"  # room again
    finally:
        api.close()


@pytest.fixture()
def chat_job(make_api, models_dir, tmp_path, monkeypatch):
    """An API whose Space allows 3 chat streams (2 per person), and a finished job with an adapter, per owner."""
    from tests.unit.chat.test_chat import _build_adapter

    monkeypatch.setenv("STUDIO_MAX_CHAT_STREAMS", "3")
    api = make_api()
    adapter = _build_adapter(models_dir, tmp_path / "adapter", seed=1)
    jobs = {}
    for owner in ("ann", "ben", "cat"):
        job = api.jobs.submit(tiny_spec(), owner).job
        assert api.core.store.claim_next().id == job.id
        api.core.store.merge_artifacts(job.id, adapter_dir=str(adapter))
        api.core.store.finish(job.id, JobStatus.succeeded)
        jobs[owner] = job.id
    return api, jobs


def test_chat_streams_are_limited_per_person_and_on_the_whole_space_and_freed_when_dropped(chat_job):
    api, jobs = chat_job
    settings = GenerationSettings(max_new_tokens=8)

    def chat(name):
        stream = api.chat.chat_pair(jobs[name], [], [], "hello", settings, User(name))
        next(stream)  # answering
        return stream

    ann = [chat("ann"), chat("ann")]
    with pytest.raises(Busy, match="chat: you already have 2 running, the most one person may"):
        chat("ann")
    ben = chat("ben")
    with pytest.raises(
        Busy,
        match=r"chat: this Space is running 3 at once, the most it allows "
        r"\(STUDIO_MAX_CHAT_STREAMS = 3\); try again in a few seconds",
    ):
        chat("cat")
    del ann[0]  # a browser that left mid-answer
    cat = chat("cat")
    assert api.chat._streams.in_flight() == 3
    list(ben)  # read to the end
    assert list(cat)[-1] and api.chat._streams.in_flight() == 1  # ann's other one
    ann.clear()
    assert api.chat._streams.in_flight() == 0


def test_a_dry_run_stays_counted_until_it_really_ends_even_after_its_caller_stopped_waiting(data_dir, monkeypatch):
    import threading

    from backend.api.guards import DRY_RUNS
    from backend.platform.limits import TimedOut, TimeLimit

    monkeypatch.setenv("STUDIO_MAX_DRY_RUNS", "1")
    api = StudioAPI(data_dir, scheduler="none")
    api.environments._dry_run_time = TimeLimit("dry run", 0.5, workers=1)
    gate = threading.Event()
    try:
        with pytest.raises(TimedOut):
            # still playing after the caller gave up
            api.environments._held_run(api.environments._dry_runs, User("ann"), gate.wait)
        with pytest.raises(Busy, match=r"dry run: this Space is running 1 at once.*STUDIO_MAX_DRY_RUNS = 1"):
            api.environments._held_run(api.environments._dry_runs, User("ben"), lambda: "played")
        gate.set()
        wait_for(lambda: api.environments._dry_runs.in_flight() == 0, 5, what="the play to end")
        assert api.environments._held_run(api.environments._dry_runs, User("ben"), lambda: "played") == "played"
        assert DRY_RUNS.default == 2
    finally:
        gate.set()
        api.close()


# --- killed mid-write: no half file is ever where files are looked up or served ----------------------------------


def _kill_when(proc, appeared: Path, timeout: float = 60) -> None:
    import signal

    wait_for(lambda: appeared.exists() or proc.poll() is not None, timeout, interval=0.01, what=f"{appeared}")
    assert proc.poll() is None, "the process ended before it could be killed mid-write"
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _age(path: Path, seconds: float = 7200) -> None:
    import os
    import time

    old = time.time() - seconds
    os.utime(path, (old, old))


def test_a_process_killed_mid_upload_leaves_no_upload_and_the_leftover_is_swept(data_dir, tmp_path):
    import subprocess
    import sys

    from backend.core.paths import user_folder

    big = write_jsonl(tmp_path / "big.jsonl", [{"text": f"row {i} " + "z" * 500} for i in range(200_000)])  # 100 MB
    uploads_dir = DataPaths(data_dir).uploads("ann")
    code = (
        "import sys; from pathlib import Path; from backend.data.uploads import keep_upload; "
        "from backend.core.spec import Method; "
        "keep_upload(Path(sys.argv[1]), 'big.jsonl', Method.sft, Path(sys.argv[2]))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(big), str(uploads_dir)], cwd=ROOT)
    wait_for(
        lambda: (
            (uploads_dir / ".staging").is_dir() and any((uploads_dir / ".staging").iterdir()) or proc.poll() is not None
        ),
        60,
        interval=0.01,
        what="the staged copy",
    )
    staged = next((uploads_dir / ".staging").iterdir())
    _kill_when(proc, staged)
    assert [p.name for p in uploads_dir.iterdir()] == [".staging"], "a half upload where ids are looked up"
    StudioAPI(data_dir, scheduler="none").close()  # a start sweeps only what is too old to be in use
    assert staged.exists()
    _age(staged)
    StudioAPI(data_dir, scheduler="none").close()
    assert not staged.exists() and uploads_dir.name == user_folder("ann")


def test_a_process_killed_mid_zip_serves_no_half_zip_and_the_leftover_is_swept(data_dir, tmp_path):
    import os
    import subprocess
    import sys

    api = StudioAPI(data_dir, scheduler="none")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(os.urandom(150 * 2**20))  # seconds to deflate
    job = api.jobs.submit(tiny_spec(), "ann").job
    api.core.store.claim_next()
    api.core.store.merge_artifacts(job.id, adapter_dir=str(adapter))
    api.core.store.finish(job.id, JobStatus.succeeded)
    api.close()
    code = (
        "import sys; from backend.api import StudioAPI; "
        "StudioAPI(sys.argv[1], scheduler='none').jobs.adapter_archive(sys.argv[2])"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(data_dir), job.id], cwd=ROOT)
    downloads = DataPaths(data_dir).downloads
    wait_for(
        lambda: list(downloads.glob("*/.partial*")) or proc.poll() is not None,
        60,
        interval=0.01,
        what="the partial zip",
    )
    partial = next(downloads.glob("*/.partial*"))
    _kill_when(proc, partial)
    assert list(downloads.glob("*/*.zip")) == [partial], "only the partial file, under a name never served"
    _age(partial)
    StudioAPI(data_dir, scheduler="none").close()
    assert list(downloads.iterdir()) == []


def test_an_upload_or_a_zip_on_a_full_disk_is_a_sentence_and_leaves_nothing(data_dir, tmp_path):
    paths = DataPaths(data_dir)
    api = StudioAPI(data_dir, scheduler="none")
    try:
        with tmpfs(paths.root / "uploads", "1m"), tmpfs(paths.downloads, "1m"):
            rows = write_jsonl(tmp_path / "rows.jsonl", CHAT_ROWS * 300)  # more than the free space
            fill(paths.root / "uploads")
            with pytest.raises(
                SpecError, match="rows.jsonl was not kept: the disk that holds the studio’s data is full"
            ):
                api.datasets.upload_dataset(rows, "rows.jsonl", "sft", User("ann"))
            assert [p.name for p in (paths.root / "uploads").rglob("*") if p.is_file()] == ["filler"]
            adapter = tmp_path / "adapter"
            adapter.mkdir()
            (adapter / "adapter_model.safetensors").write_bytes(b"\1" * 3 * 2**20)
            job = api.jobs.submit(tiny_spec(), "ann").job
            api.core.store.claim_next()
            api.core.store.merge_artifacts(job.id, adapter_dir=str(adapter))
            api.core.store.finish(job.id, JobStatus.succeeded)
            fill(paths.downloads)
            with pytest.raises(
                ValueError, match="the adapter could not be zipped: the disk that holds the studio’s data is full"
            ):
                api.jobs.adapter_archive(job.id)
            assert [p.name for p in paths.downloads.iterdir()] == ["filler"]
    finally:
        api.close()


# --- a read-only store: reads answer, writes are refused with a sentence, nothing is half-written ------------------


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` (the data dir) with its size, the SQLite files aside (their pages move on reads)."""
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith("studio.sqlite3") and "models" not in p.parts
    }


def _quick(call):
    """``call()``, asserted to answer within 2 s."""
    started = time.monotonic()
    answer = call()
    assert time.monotonic() - started < 2, f"took {time.monotonic() - started:.1f} s"
    return answer


def _refusals(api, job_id: str, alice: User, tmp_path: Path) -> dict[str, str]:
    """What each kind of write says on a read-only data folder (it must raise a sentence)."""
    said = {}
    writes = {
        # Another spec than the job already queued: the same one again would be answered with that job.
        "submit": lambda: api.jobs.submit(tiny_spec(training={"seed": 7}), user=alice),
        "cancel": lambda: api.jobs.cancel(job_id, alice),
        "upload": lambda: api.datasets.upload_dataset(
            write_jsonl(tmp_path / "up.jsonl", CHAT_ROWS), "up.jsonl", "sft", alice
        ),
        "thumb": lambda: api.chat.thumb_log(alice).record(_asked("3 + 3?"), "6", True, "tuned", job_id),
        "export": lambda: api.chat.export_preferences(alice, "kto"),
    }
    for name, write in writes.items():
        with pytest.raises((SpecError, ValueError)) as refused:
            _quick(write)
        said[name] = str(refused.value)
    return said


def test_a_data_folder_made_read_only_under_the_running_app_serves_reads_and_refuses_writes_with_a_sentence(
    data_dir, tmp_path
):
    api = StudioAPI(data_dir, scheduler="none")
    alice, bob = User("alice"), User("bob")
    job_id = api.jobs.submit(tiny_spec(), user=alice).job.id
    api.chat.thumb_log(alice).record(_asked("2 + 2?"), "4", True, "tuned", job_id)
    before = _files(data_dir)
    try:
        with read_only(data_dir):
            assert "is read-only: jobs, logs and adapters can be read" in api.storage_notice()
            assert [j.id for j in _quick(lambda: api.jobs.list_jobs(user=alice))] == [job_id]
            assert _quick(lambda: api.jobs.get_job(job_id, alice)).status is JobStatus.queued
            assert _quick(lambda: api.jobs.metrics_since(job_id, 0, alice)).cursor == 0
            assert len(_quick(lambda: api.chat.thumb_log(alice).rows())) == 1
            for name, sentence in _refusals(api, job_id, alice, tmp_path).items():
                assert "read-only" in sentence and "Traceback" not in sentence and len(sentence) < 300, (name, sentence)
            assert _quick(lambda: api.jobs.list_jobs(user=bob)) == []  # another user's read answers too
            assert _files(data_dir) == before  # nothing written, nothing half-written
        assert api.storage_notice() is None  # writable again: the same process writes, with nothing to restart
        assert api.jobs.submit(tiny_spec(), user=bob).job.owner == "bob"
        assert api.jobs.cancel(job_id, alice) is JobStatus.cancelled
    finally:
        api.close()


def test_an_app_started_on_a_read_only_mount_serves_reads_says_writes_are_off_and_refuses_them(data_dir, tmp_path):
    mount = tmp_path / "mount"
    with tmpfs(mount, "64m"):
        studio = mount / "studio"
        (studio / "models").mkdir(parents=True)
        for model in (data_dir / "models").iterdir():  # the built demo models, as a real data dir has them
            (studio / "models" / model.name).symlink_to(model.resolve(), target_is_directory=True)
        api = StudioAPI(studio, scheduler="none")
        alice = User("alice")
        job_id = api.jobs.submit(tiny_spec(), user=alice).job.id
        api.chat.thumb_log(alice).record(_asked("2 + 2?"), "4", True, "tuned", job_id)
        api.close()  # a restart: the old process is gone and has closed every file
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        try:
            before = _files(studio)
            api = StudioAPI(studio, scheduler="thread")  # the app's own mode: its scheduler must not die of it
            try:
                assert "is read-only" in api.storage_notice()
                assert [j.id for j in _quick(lambda: api.jobs.list_jobs(user=alice))] == [job_id]
                assert _quick(lambda: api.jobs.get_job(job_id, alice)).status is JobStatus.queued
                assert len(api.chat.thumb_log(alice).rows()) == 1 and api.core.remote.list() == []
                for name, sentence in _refusals(api, job_id, alice, tmp_path).items():
                    assert "read-only" in sentence and len(sentence) < 300, (name, sentence)
                assert api.scheduler_health().alive
                assert _files(studio) == before
            finally:
                api.close()
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
