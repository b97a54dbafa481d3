"""output.trackio: a real job logs to trackio under the data dir (never ~/.cache), off by default."""

import json
import os
import subprocess
import sys

import pytest

from backend.api import StudioAPI
from backend.jobs.records import JobStatus
from backend.platform.tracking import trackio_dir, trackio_project
from tests.helpers import ROOT, tiny_spec, wait_status

pytestmark = pytest.mark.slow

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}
# Reads a run back with trackio's own storage, as its dashboard does (TRACKIO_DIR is read when trackio is imported).
_READ_RUN = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage
print(json.dumps({"projects": SQLiteStorage.get_projects(), "runs": SQLiteStorage.get_runs(sys.argv[1]),
                  "logs": SQLiteStorage.get_logs(sys.argv[1], sys.argv[2])}, default=str))
"""


def test_a_job_with_trackio_logs_its_loss_under_the_data_dir_and_one_without_writes_nothing(
    paths, store, scheduler_factory, tmp_path, monkeypatch
):
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))  # where trackio would write by default: it must stay empty
    api = StudioAPI(paths.root, scheduler="none")
    plain = api.jobs.submit(tiny_spec()).job
    tracked = api.jobs.submit(tiny_spec(output={"trackio": True, "run_name": "demo run"})).job
    scheduler_factory()
    assert wait_status(store, plain.id, FINAL).status is JobStatus.succeeded
    assert not trackio_dir(paths).exists(), "trackio is off by default"
    assert api.jobs.trackio_dashboard(plain.id) is None
    done = wait_status(store, tracked.id, FINAL)
    assert done.status is JobStatus.succeeded, done.error

    read = subprocess.run(
        [sys.executable, "-c", _READ_RUN, trackio_project("local"), f"demo_run-{tracked.id}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRACKIO_DIR": str(trackio_dir(paths))},
    )
    assert read.returncode == 0, read.stderr[-2000:]
    found = json.loads(read.stdout.splitlines()[-1])
    assert found["projects"] == ["studio-local"] and found["runs"] == [f"demo_run-{tracked.id}"]
    losses = [row["train/loss"] for row in found["logs"] if row.get("train/loss") is not None]
    assert len(losses) == 4, found["logs"]  # max_steps 4, logged every step
    assert not (home / "trackio").exists(), "nothing went to HF_HOME"
    assert (
        api.jobs.trackio_dashboard(tracked.id)
        == f"TRACKIO_DIR={trackio_dir(paths)} trackio show --project studio-local"
    )
