"""Nothing lost when the Space restarts (backend/platform/storage.py): the mode chosen from the data dir's
filesystem, the durable copy a network filesystem gets (a snapshot by SQLite's backup API, every file whole or not
at all), a snapshot cut short by SIGKILL, and a real restart: the app and its workers SIGKILLed, the local disk wiped,
the app started again on the same /data, the running job resuming from its checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.jobs.records import JobStatus
from backend.platform.mirror import Mirror
from backend.platform.storage import DB_NAME, StorageError, storage_plan
from tests.helpers import ROOT, tiny_spec, wait_for, wait_status
from tests.helpers.apps import launch_app


def network_world(tmp_path: Path, models_dir: Path, monkeypatch) -> tuple[Path, Path]:
    """A "/data" folder and a "local disk" folder, with the mode forced to network (the test fakes only the type)."""
    data, local = tmp_path / "data", tmp_path / "local"
    local.mkdir()
    (local / "models").symlink_to(models_dir, target_is_directory=True)
    monkeypatch.setenv("STUDIO_DATA_DIR", str(data))
    monkeypatch.setenv("STUDIO_LOCAL_DIR", str(local))
    monkeypatch.setenv("STUDIO_DATA_FS", "network")
    return data, local


def snapshot_jobs(path: Path) -> dict[str, str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT id, status FROM jobs").fetchall())
    finally:
        con.close()


def snapshot_step(path: Path, job_id: str) -> int | None:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT MAX(step) FROM metrics WHERE job_id = ?", (job_id,)).fetchone()[0]
    finally:
        con.close()


def test_the_mode_follows_the_filesystem_and_its_override(tmp_path, monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("STUDIO_DATA_FS", raising=False)
    monkeypatch.delenv("STUDIO_LOCAL_DIR", raising=False)
    assert storage_plan(tmp_path / "data").mode == "local"  # the test machine's disk
    monkeypatch.setenv("STUDIO_DATA_FS", "network")
    monkeypatch.setenv("STUDIO_LOCAL_DIR", str(tmp_path / "local"))
    plan = storage_plan(tmp_path / "data")
    assert (plan.mode, plan.live, plan.durable) == ("network", tmp_path / "local", tmp_path / "data")
    assert "STUDIO_DATA_FS=network" in plan.describe() and str(tmp_path / "local") in plan.describe()
    monkeypatch.setenv("STUDIO_DATA_FS", "nfs")
    with pytest.raises(StorageError, match="STUDIO_DATA_FS must be auto, network or local"):
        storage_plan(tmp_path / "data")


def test_on_a_network_filesystem_the_live_store_is_not_on_data(tmp_path, models_dir, monkeypatch):
    data, local = network_world(tmp_path, models_dir, monkeypatch)
    api = StudioAPI(scheduler="none")
    try:
        job = api.jobs.submit(tiny_spec(output={"run_name": "kept"})).job
        assert api.core.storage.mode == "network"
        assert api.core.paths.db == local / DB_NAME and api.core.paths.db.is_file()
        assert not (data / DB_NAME).exists() or data not in api.core.paths.db.parents
        status = api.storage_status()
        assert status["live"] == str(local) and status["durable"] == str(data)
        from components.header import status_text

        line = status_text(None, None, api.storage_notice(), api.storage_summary())
        assert f"Data: copied to {data} (network filesystem; last snapshot none yet)" in line
    finally:
        api.close()
    # `status` on the command line says the same, in words.
    out = subprocess.run(
        [sys.executable, "-m", "backend", "status"], cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "network filesystem" in out.stdout and str(data) in out.stdout
    # Mirroring: the snapshot is a consistent SQLite file on /data holding the job, the job's files are there too.
    (local / "jobs" / job.id / "train.log").parent.mkdir(parents=True, exist_ok=True)
    (local / "jobs" / job.id / "train.log").write_text("step 1\n")
    mirror = Mirror(local, data, interval_s=60)
    assert mirror.sync()
    assert snapshot_jobs(data / DB_NAME) == {job.id: "queued"}
    assert (data / "jobs" / job.id / "train.log").read_text() == "step 1\n"
    assert not any(".part-" in p.name for p in data.rglob("*")), "no temporary file is left behind"
    # A job folder deleted on the live side goes from /data at the next cycle; the store, the links, and files
    # handed to browsers are never copied.
    shutil.rmtree(local / "jobs" / job.id)
    assert mirror.sync()
    assert not (data / "jobs" / job.id).exists()
    assert not (data / "models").exists() and not (data / "downloads").exists()


def test_checkpoints_reach_data_whole_and_follow_rotation(tmp_path):
    live, data = tmp_path / "local", tmp_path / "data"
    output = live / "jobs" / "j1" / "output"
    half = output / "checkpoint-20"
    half.mkdir(parents=True)
    (half / "adapter_model.safetensors").write_bytes(b"w" * 1000)  # trainer_state.json, written last, not yet
    whole = output / "checkpoint-10"
    whole.mkdir()
    for name in ("adapter_model.safetensors", "optimizer.pt", "trainer_state.json"):
        (whole / name).write_text(name)
    mirror = Mirror(live, data, interval_s=60)
    assert mirror.sync()
    durable = data / "jobs" / "j1" / "output"
    assert sorted(p.name for p in durable.iterdir()) == ["checkpoint-10"], "a checkpoint still being written waits"
    assert sorted(p.name for p in (durable / "checkpoint-10").iterdir()) == sorted(p.name for p in whole.iterdir())
    (half / "trainer_state.json").write_text("{}")
    shutil.rmtree(whole)  # the trainer's rotation (save_total_limit)
    assert mirror.sync()
    assert sorted(p.name for p in durable.iterdir()) == ["checkpoint-20"]
    # A new mirror (the next start) learns what /data holds and still follows deletions made before its first cycle.
    shutil.rmtree(half)
    assert Mirror(live, data, interval_s=60).sync()
    assert not (data / "jobs").exists()


def test_a_cycle_cut_before_its_snapshot_keeps_a_checkpoint_the_last_snapshot_can_resume_from(tmp_path, monkeypatch):
    """Seen 2026-12-07 on a slow machine: a restart resumed a job from the start. The cycle before the SIGKILL had
    copied the new checkpoints and deleted the rotated one, but its snapshot never came: the durable store was the
    older one, every durable checkpoint was past its last logged step, and the restore sets those aside."""
    import backend.platform.mirror as mirror_module
    from backend.jobs.store import JobStore

    live, data = tmp_path / "local", tmp_path / "data"
    live.mkdir()
    store = JobStore(live / DB_NAME)
    output = live / "jobs" / "j1" / "output"

    def checkpoint(step: int) -> Path:
        folder = output / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        for name in ("adapter_model.safetensors", "trainer_state.json"):
            (folder / name).write_text(f"{name} {step}")
        return folder

    first = checkpoint(10)
    mirror = Mirror(live, data, interval_s=60)
    try:
        assert mirror.sync() and (data / DB_NAME).exists()
        durable = data / "jobs" / "j1" / "output"
        store.add(parse_spec(tiny_spec()))  # the store moved on (steps logged), then two checkpoints, one rotated
        checkpoint(20)
        shutil.rmtree(first)

        def no_room(*_args) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(mirror_module, "backup_store", no_room)
        assert not mirror.sync()
        assert sorted(p.name for p in durable.iterdir()) == ["checkpoint-10", "checkpoint-20"], (
            "the published snapshot's checkpoint stays until a newer snapshot is published"
        )
        monkeypatch.undo()
        checkpoint(30)  # and the one the cut cycle copied rotated away too: it must not stay on /data for good
        shutil.rmtree(output / "checkpoint-20")
        store.add(parse_spec(tiny_spec()))
        assert mirror.sync()
        assert sorted(p.name for p in durable.iterdir()) == ["checkpoint-30"]
    finally:
        store.close()


def test_only_the_process_serving_the_queue_writes_data(tmp_path, models_dir, monkeypatch):
    """Two app processes on one data dir (a restart's old and new overlapping): the one holding the scheduler lock
    copies to /data, the other neither restores over the live store nor copies."""
    data, local = network_world(tmp_path, models_dir, monkeypatch)
    first = StudioAPI(scheduler="thread", poll_interval=0.1)
    try:
        wait_for(lambda: first.scheduler_health().owns_queue, 30, what="the first to take the queue")
        second = StudioAPI(scheduler="thread", poll_interval=0.1)
        try:
            assert second.mirror_status.notes == [] and not second.scheduler_health().owns_queue
            assert second.mirror is not None and second.mirror.sync() is False
            assert first.mirror is not None and first.mirror.sync() is True
        finally:
            second.close()
    finally:
        first.close()
    assert (data / DB_NAME).is_file()


def test_a_full_data_disk_leaves_the_last_snapshot_and_says_so(tmp_path, models_dir, monkeypatch):
    """/data fills up mid-copy: the cycle fails with a sentence the header shows, leaves no half file and the last
    snapshot intact; the live side goes on, and once there is room the next cycle catches up."""
    from tests.helpers.faults import tmpfs

    data, local = network_world(tmp_path, models_dir, monkeypatch)
    with tmpfs(data, "1m"):
        api = StudioAPI(scheduler="none")
        try:
            first = api.jobs.submit(tiny_spec(output={"run_name": "before-full"})).job
            mirror = Mirror(local, data, interval_s=60, status=api.mirror_status)
            assert mirror.sync()
            big = local / "jobs" / first.id / "train.log"
            big.parent.mkdir(parents=True, exist_ok=True)
            big.write_bytes(b"x" * (3 * 2**20))  # more than /data holds
            second = api.jobs.submit(tiny_spec(output={"run_name": "after-full"})).job
            assert mirror.sync() is False
            assert "is full" in api.mirror_status.last_error
            assert "The durable copy is behind" in api.storage_notice()
            assert not any(".part-" in p.name for p in data.rglob("*")), "no half file is left on /data"
            assert snapshot_jobs(data / DB_NAME) == {first.id: "queued"}, "the last snapshot is intact"
            assert {j.id for j in api.jobs.list_jobs()} == {first.id, second.id}, "the live store goes on"
            big.write_text("short now\n")
            assert mirror.sync() and api.mirror_status.last_error is None and api.storage_notice() is None
            assert snapshot_jobs(data / DB_NAME) == {first.id: "queued", second.id: "queued"}
        finally:
            api.close()


def test_a_sigkill_in_the_middle_of_a_snapshot_leaves_the_previous_one(tmp_path, models_dir, monkeypatch):
    data, local = network_world(tmp_path, models_dir, monkeypatch)
    api = StudioAPI(scheduler="none")
    first = api.jobs.submit(tiny_spec(output={"run_name": "first"})).job
    mirror = Mirror(local, data, interval_s=60)
    assert mirror.sync()
    api.jobs.submit(tiny_spec(output={"run_name": "second"}))
    api.close()
    # The next snapshot is written by a real process that is SIGKILLed halfway: its source is a pipe the test feeds
    # half a database through, so the kill lands while the copy is under its temporary name.
    fifo = tmp_path / "snapshot.pipe"
    os.mkfifo(fifo)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from backend.platform.mirror import copy_file_atomically; "
            "copy_file_atomically(Path(sys.argv[1]), Path(sys.argv[2]))",
            str(fifo),
            str(data / DB_NAME),
        ],
        cwd=ROOT,
    )
    try:
        whole = (local / DB_NAME).read_bytes()
        with open(fifo, "wb") as pipe:
            pipe.write(whole[: len(whole) // 2])
            pipe.flush()
            wait_for(lambda: any(".part-" in p.name for p in data.iterdir()), 30, what="the copy to begin")
            writer.send_signal(signal.SIGKILL)
            writer.wait(10)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert any(".part-" in p.name for p in data.iterdir()), "the kill left a half copy under its temporary name"
    # The machine goes away with its local disk; the next start restores the previous snapshot, and says so.
    shutil.rmtree(local)
    api = StudioAPI(scheduler="none")  # restores before it opens the store
    try:
        notes = api.mirror_status.notes
        assert any("cut short" in n for n in notes) and any("Restored the job store" in n for n in notes), notes
        assert "cut short when the studio last stopped; the previous one, of" in api.storage_notice()
        assert snapshot_jobs(local / DB_NAME) == {first.id: "queued"}
        assert not any(".part-" in p.name for p in data.iterdir())
        assert [j.id for j in api.jobs.list_jobs()] == [first.id]
    finally:
        api.close()


@pytest.mark.slow
def test_a_restart_with_a_wiped_local_disk_loses_nothing(tmp_path, models_dir, monkeypatch):
    """The app queues, trains, thumbs and uploads; then it and its workers are SIGKILLed, the local disk is wiped
    and the app starts again on the same /data: the store is the last snapshot's, the running job resumes from its
    last checkpoint and succeeds with each step logged once, and every upload, thumb and adapter is there."""
    data, local = network_world(tmp_path, models_dir, monkeypatch)
    env = {
        "STUDIO_LOCAL_DIR": str(local),
        "STUDIO_DATA_FS": "network",
        "STUDIO_SNAPSHOT_INTERVAL_S": "1",
        "STUDIO_MAX_CONCURRENT_JOBS": "1",
    }
    upload = tmp_path / "mine.jsonl"
    upload.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]})
            + "\n"
            for i in range(8)
        )
    )
    long_steps = 400
    with launch_app(data, extra_env=env) as app:
        api = StudioAPI(scheduler="none")  # the same live store, through the facade (the app serves the queue)
        short = api.jobs.submit(tiny_spec(output={"run_name": "short"})).job
        long = api.jobs.submit(
            tiny_spec(
                output={"run_name": "long"},
                training={"max_steps": long_steps, "save_steps": 10, "logging_steps": 1, "max_length": 64},
            )
        ).job
        waiting = api.jobs.submit(tiny_spec(output={"run_name": "waiting"})).job
        upload_id, _ = api.datasets.upload_dataset(upload, "mine.jsonl", "sft")
        api.chat.thumb_log().record([{"role": "user", "content": "hi"}], "hello", True, "tuned", short.id)
        wait_status(api.core.store, short.id, {JobStatus.succeeded}, 180)
        durable_long = data / "jobs" / long.id / "output"

        def caught_mid_run() -> bool:
            steps = [int(p.name.rsplit("-", 1)[-1]) for p in durable_long.glob("checkpoint-*")]
            snap = data / DB_NAME
            if not steps or max(steps) < 20 or not snap.exists():
                return False
            return snapshot_jobs(snap).get(short.id) == "succeeded" and (snapshot_step(snap, long.id) or 0) >= 20

        wait_for(caught_mid_run, 240, what="a mirrored checkpoint of the long job")
        assert api.core.store.get(long.id).status is JobStatus.running, "the long job must still be training"
        worker = api.core.store.get(long.id).pid
        api.close()
        os.killpg(app.proc.pid, signal.SIGKILL)  # the machine goes away: no shutdown, no last snapshot
        os.killpg(worker, signal.SIGKILL)
        app.proc.wait(10)
    at_kill = snapshot_jobs(data / DB_NAME)
    assert at_kill[long.id] == "running" and at_kill[waiting.id] == "queued"
    shutil.rmtree(local)  # a fresh machine: its own disk is empty
    local.mkdir()
    (local / "models").symlink_to(models_dir, target_is_directory=True)
    with launch_app(data, extra_env=env) as app:
        api = StudioAPI(scheduler="none")
        try:
            assert set(at_kill) == {j.id for j in api.jobs.list_jobs()}, "the store is the last snapshot's"
            done = wait_status(api.core.store, long.id, {JobStatus.succeeded, JobStatus.failed}, 300)
            assert done.status is JobStatus.succeeded, done.error
            (interruption,) = done.artifacts.interruptions
            assert interruption["resumed"] and interruption["at_step"] >= 20
            assert done.artifacts.resumed_from and "checkpoint-" in done.artifacts.resumed_from
            steps = [row["step"] for row in api.jobs.metrics(long.id) if "loss" in row]
            assert steps == list(range(1, long_steps + 1)), "every step logged once, none missing"
            assert wait_status(api.core.store, waiting.id, {JobStatus.succeeded}, 180).artifacts.interruptions is None
            assert Path(api.jobs.get_job(short.id).artifacts.adapter_dir).is_dir()
            assert short.id in [j.id for j in api.jobs.finished_jobs()]
            assert api.chat.thumb_log().rows()[0]["completion"][0]["content"] == "hello"
            api.datasets.check_upload(upload_id, "sft")
            assert "Restored the job store" in app.log_tail(200_000)
        finally:
            api.close()


@pytest.mark.slow
def test_a_space_without_storage_says_so_and_pushes_adapters_by_default(tmp_path, models_dir, monkeypatch):
    """No /data on a Space: the header warns in one sentence, the Train form starts with "Push to the Hub when done"
    on, and a signed-in user's job pushes its adapter (to the local Hub endpoint) as it finishes."""
    import gradio as gr
    from huggingface_hub import constants

    from backend.core.users import User
    from components import header
    from components import train as train_tab
    from tests.helpers.hub_server import FakeHub

    token = "hf_NO_STORAGE_TOKEN_1a2b3c"
    monkeypatch.chdir(tmp_path)  # the studio falls back to ./data, here
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "models").symlink_to(models_dir, target_is_directory=True)
    monkeypatch.delenv("STUDIO_DATA_DIR", raising=False)
    monkeypatch.delenv("STUDIO_DATA_FS", raising=False)
    monkeypatch.setenv("SPACE_ID", "space-owner/post-training-studio")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with FakeHub(token, user="alice") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        api = StudioAPI(scheduler="thread", poll_interval=0.1)
        try:
            assert api.core.storage.mode == "none" and api.core.paths.root == tmp_path / "data"
            line = header.status_text(User("alice"), None, api.storage_notice())
            assert "no persistent storage" in line and "vanish at its next restart" in line and "/data" in line
            with gr.Blocks():
                handles = train_tab.build(api)
            assert handles.inputs["push_to_hub"].value is True
            user = User("alice", token=token)
            job = api.jobs.submit(tiny_spec(output={"push_to_hub": True, "run_name": "kept-on-hub"}), user=user).job
            assert wait_status(api.core.store, job.id, {JobStatus.succeeded, JobStatus.failed}, 240).status is (
                JobStatus.succeeded
            )
            done = wait_for(lambda: (j := api.jobs.get_job(job.id)).artifacts.hub or j.artifacts.hub_error and j, 120)
            done = api.jobs.get_job(job.id)
            assert done.artifacts.hub and done.artifacts.hub.repo_id == "alice/kept-on-hub", done.artifacts.hub_error
            repo = hub.repos["alice/kept-on-hub"]
            assert repo.private and "adapter_model.safetensors" in repo.files
        finally:
            api.close()


def test_the_mirror_leaves_a_users_transient_copies_out(tmp_path):
    # Issue 48: a job's copies of its rows (uploads/<user>/.datasets-cache) and uploads being checked (.staging) go
    # when the read ends; the mirror must not carry them to durable storage each cycle.
    from backend.platform.mirror import _scan

    user = tmp_path / "uploads" / "alice"
    for rel in ("rows.jsonl", ".datasets-cache/read-1/data.arrow", ".staging/abc-rows.jsonl"):
        (user / rel).parent.mkdir(parents=True, exist_ok=True)
        (user / rel).write_text("x")
    files, _ = _scan(tmp_path)
    assert sorted(files) == ["uploads/alice/rows.jsonl"]
