"""Jobs of two training processes, really run: CPU ranks under ``accelerate launch`` with DDP over gloo, through the
real scheduler and store (what they record, their verdict against one process, cancel, a rank that dies)."""

import os
import signal
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.core.spec import JobSpec
from backend.jobs.records import JobStatus
from tests.helpers import tiny_spec, wait_for, wait_status

pytestmark = pytest.mark.slow

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}
ARITH = {"model": {"name_or_path": "builtin:tiny-qwen3-arith"}, "dataset": {"source": "builtin", "name": "arith-sft"}}
NAME = "adapter_model.safetensors"
LONG = {"max_steps": 100000, "save_steps": 100000}


def _ranks(job_id: str) -> dict[int, int]:
    """{rank: pid} of the job's live ranks, found in /proc: a worker of the job with RANK in its environment."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if job_id.encode() not in cmdline or b"backend.worker" not in cmdline or b"-m" not in cmdline:
                continue
            env = dict(v.split(b"=", 1) for v in (entry / "environ").read_bytes().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if b"RANK" in env and not _gone(int(entry.name)):
            found[int(env[b"RANK"])] = int(entry.name)
    return found


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except (ProcessLookupError, FileNotFoundError):
        return True


def _training_ranks(store, job_id: str) -> dict[int, int]:
    wait_for(lambda: store.get(job_id).progress.get("step", 0) >= 1, 240, what=f"{job_id} to train")
    return wait_for(lambda: r if len(r := _ranks(job_id)) == 2 else None, 30, what="both ranks in /proc")


def test_sft_in_two_processes_records_them_saves_one_adapter_and_learns_as_one_process(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    settings = {"max_steps": 8, "batch_size": 8, "learning_rate": 2e-3, "max_length": 128, "save_steps": 100}
    one = api.jobs.submit(tiny_spec(**ARITH, training=settings, eval={"holdout_rows": 32})).job
    two = api.jobs.submit(tiny_spec(**ARITH, training={**settings, "num_processes": 2}, eval={"holdout_rows": 32})).job
    scheduler_factory()
    single, double = wait_status(store, one.id, FINAL, 400), wait_status(store, two.id, FINAL, 400)
    assert single.status is JobStatus.succeeded and double.status is JobStatus.succeeded, double.error
    run = double.artifacts.distributed
    assert (run.processes, run.backend, run.strategy) == (2, "gloo", "ddp")
    # The same spec trains the same global batch: 8 examples a step, 4 in each process.
    assert (run.per_process_batch, run.global_batch) == (4, 8)
    assert single.artifacts.distributed is None
    # One adapter, saved by rank 0; the job's metrics hold each step once (only rank 0 reports).
    adapters = sorted(paths.job_dir(two.id).rglob("adapter_model.safetensors"))
    output = paths.job_output(two.id)
    assert adapters == [paths.job_adapter(two.id) / "adapter_model.safetensors", output / "checkpoint-8" / NAME]
    assert JobSpec.from_json((paths.job_dir(two.id) / "spec.json").read_text()).training.batch_size == 8
    steps = [row["step"] for row in api.jobs.metrics(two.id) if row.get("loss") is not None]
    assert steps == sorted(set(steps)) and steps[-1] == 8
    # The verdict of the two-process run matches the one-process run's within its interval.
    a, b = single.artifacts.learning, double.artifacts.learning
    assert a is not None and b is not None and a.rows == b.rows == 32
    assert abs(a.delta - b.delta) <= max(a.ci95, b.ci95), (a.sentence, b.sentence)
    assert a.after == pytest.approx(b.after, abs=max(a.ci95, b.ci95))


def test_grpo_in_two_processes(paths, store, scheduler_factory):
    spec = tiny_spec(
        method="grpo",
        model={"name_or_path": "builtin:tiny-qwen3-arith"},
        dataset={"source": "builtin", "name": "arith-prompts"},
        rollout={"num_generations": 4, "max_completion_length": 16, "rewards": [{"name": "accuracy"}]},
        training={"num_processes": 2, "max_steps": 2, "batch_size": 8, "max_length": 128, "save_steps": 100},
        eval={"holdout_rows": 8},
        forecast={"train_anyway": True},  # answers cut at 16 tokens: no signal, trained anyway
    )
    job = StudioAPI(paths.root, scheduler="none").jobs.submit(spec).job
    scheduler_factory()
    done = wait_status(store, job.id, FINAL, 400)
    assert done.status is JobStatus.succeeded, done.error
    run = done.artifacts.distributed
    assert (run.processes, run.backend, run.per_process_batch, run.global_batch) == (2, "gloo", 4, 8)
    assert (paths.job_adapter(job.id) / "adapter_model.safetensors").is_file()
    assert done.artifacts.learning is not None and done.artifacts.learning.rows == 8
    # The forecast ran on both ranks, each its share of the prompts, gathered: 2 prompts x 4 completions.
    forecast = done.artifacts.forecast
    assert forecast is not None and (forecast.prompts, forecast.completions) == (2, 8), forecast


def test_cancel_stops_every_rank(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(training={**LONG, "num_processes": 2})).job
    scheduler_factory()
    ranks = _training_ranks(store, job.id)
    launcher = store.get(job.id).pid
    assert launcher not in ranks.values()
    api.jobs.cancel(job.id)
    done = wait_status(store, job.id, FINAL, 120)
    assert done.status is JobStatus.cancelled and done.error is None, done.error
    wait_for(lambda: all(_gone(pid) for pid in [launcher, *ranks.values()]), 60, what="every rank to exit")


def test_a_rank_that_dies_fails_the_job_naming_it_and_leaves_no_rank_behind(paths, store, scheduler_factory):
    job = StudioAPI(paths.root, scheduler="none").jobs.submit(tiny_spec(training={**LONG, "num_processes": 2})).job
    scheduler_factory()
    ranks = _training_ranks(store, job.id)
    os.kill(ranks[1], signal.SIGKILL)
    done = wait_status(store, job.id, FINAL, 120)
    assert done.status is JobStatus.failed
    assert done.error.startswith("rank 1 of 2 died (killed by signal 9)"), done.error
    wait_for(lambda: all(_gone(pid) for pid in [store.get(job.id).pid, *ranks.values()]), 60, what="ranks to exit")


def test_ranks_die_with_a_killed_launcher(paths, store, scheduler_factory):
    """The scheduler's last resort kills the launcher's process group; torchrun's ranks live in sessions of their
    own, so they must die with their parent rather than train on as orphans."""
    job = StudioAPI(paths.root, scheduler="none").jobs.submit(tiny_spec(training={**LONG, "num_processes": 2})).job
    scheduler_factory()
    ranks = _training_ranks(store, job.id)
    os.killpg(store.get(job.id).pid, signal.SIGKILL)
    wait_for(lambda: all(_gone(pid) for pid in ranks.values()), 30, what="the ranks to die with their launcher")
