"""The command line, run as a real subprocess against a fresh data dir: submit --wait, list, show, cancel."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from backend.paths import DataPaths
from backend.scheduler import Scheduler
from backend.store import JobStatus
from tests.conftest import ROOT, tiny_spec, wait_for, wait_status

pytestmark = pytest.mark.slow


def cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "backend", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_submit_wait_runs_the_example_to_a_saved_adapter_with_a_progress_bar(data_dir):
    # One training run checks both faces of --wait: the progress bar with the loss, then the record it prints.
    # (--wait --json, which prints the record as JSON instead, is checked by the failed-job test below.)
    result = cli("submit", "examples/sft-demo.yaml", "--wait")
    assert result.returncode == 0, result.stderr
    assert "30/30" in result.stderr and "loss=" in result.stderr
    assert "status" in result.stdout and "succeeded" in result.stdout

    listed = json.loads(cli("list", "--json").stdout)
    assert len(listed) == 1 and listed[0]["status"] == "succeeded"
    record = json.loads(cli("show", listed[0]["id"], "--json").stdout)
    assert record["status"] == "succeeded"
    assert os.path.isfile(os.path.join(record["artifacts"]["adapter_dir"], "adapter_model.safetensors"))
    assert record["last_metrics"]["loss"] > 0 and record["progress"]["step"] == 30
    shown = cli("show", record["id"])
    assert shown.returncode == 0 and "adapter dir" in shown.stdout and "succeeded" in shown.stdout
    # The detached scheduler the CLI started leaves once the queue is empty.
    wait_for(lambda: not Scheduler.is_running(DataPaths(data_dir)), 30)


@pytest.mark.parametrize("example", ["dpo-demo", "grpo-demo"])
def test_method_examples_finish_with_a_before_after_evaluation(data_dir, example):
    result = cli("submit", f"examples/{example}.yaml", "--wait", "--json", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded"
    evaluation = record["artifacts"]["evaluation"]
    assert evaluation["rows"] == 8 and set(evaluation["base"]) == set(evaluation["tuned"])
    assert "eval tuned" in cli("show", record["id"]).stdout


def test_failed_job_makes_wait_exit_non_zero(data_dir, tmp_path, demo_model_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(demo_model_path, model)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(model={"name_or_path": str(model)})))
    (model / "tokenizer.json").unlink()  # passes pre-flight (config.json is there), fails in the worker
    (model / "tokenizer_config.json").unlink()
    result = cli("submit", str(spec), "--wait", "--json")
    assert result.returncode == 1
    record = json.loads(result.stdout)  # --wait --json: the finished record, as JSON, on stdout
    assert record["status"] == "failed" and record["id"] and record["error"]


def test_bad_spec_file_is_refused_with_exit_2_and_nothing_queued(data_dir, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("training:\n  learning_rate: -1\n  batch_size: 0\n")
    result = cli("submit", str(spec))
    assert result.returncode == 2
    assert (
        "The job was not queued" in result.stderr
        and "training.batch_size: must be from 1 to 1024, or auto" in result.stderr
    )
    assert json.loads(cli("list", "--json").stdout) == []
    assert cli("submit", str(tmp_path / "missing.yaml")).returncode == 2


def test_cancel_a_queued_job_and_unknown_ids(data_dir, store, tmp_path):
    # Hold the scheduler lock so the submitted job stays queued while we cancel it.
    holder = Scheduler(DataPaths(data_dir))
    assert holder.try_acquire()
    try:
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(tiny_spec()))
        submitted = json.loads(cli("submit", str(spec), "--json").stdout)
        assert submitted["status"] == "queued" and submitted["queue_position"] == 1
        result = cli("cancel", submitted["id"])
        assert result.returncode == 0 and "cancelled" in result.stdout
        assert store.get(submitted["id"]).status is JobStatus.cancelled
        again = cli("cancel", submitted["id"])
        assert again.returncode == 2 and "already ended" in again.stderr
        assert cli("show", "no-such-job").returncode == 2
    finally:
        holder.release()


def test_submit_without_wait_still_runs_the_job(data_dir, store, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec()))
    job_id = json.loads(cli("submit", str(spec), "--json").stdout)["id"]
    assert wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed}).status is JobStatus.succeeded


def test_warm_up_queues_the_sft_then_the_grpo_job_that_waits_for_it(data_dir, store):
    holder = Scheduler(DataPaths(data_dir))  # hold the queue: this test is about what is queued, not the training
    assert holder.try_acquire()
    try:
        result = cli("warm-up", "examples/grpo-env-demo.yaml", "--rows", "4", "--steps", "5", "--json")
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout)
        assert out["demonstrations"] == "4 demonstration episodes of echo_message (4 earned a reward)"
        sft, grpo = store.get(out["sft"]), store.get(out["grpo"])
        assert (sft.spec.method.value, sft.spec.training.max_steps, sft.spec.dataset.name) == (
            "sft", 5, out["upload_id"]
        )
        assert grpo.spec.model.parent_job_id == sft.id and grpo.status is sft.status is JobStatus.queued
        refused = cli("warm-up", "examples/sft-demo.yaml")
        assert refused.returncode == 2 and "a warm-up is for a GRPO job with an environment" in refused.stderr
        assert len(store.list()) == 2, "a refused warm-up queues nothing"
    finally:
        for job in store.list():
            store.request_cancel(job.id)
        holder.release()
