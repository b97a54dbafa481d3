"""Sweeps with real training on builtin:tiny-qwen3-arith: a 3-child learning-rate sweep from the CLI whose verdicts
differ and whose best is the child that learned most; a sweep cancelled while a child trains (every child ends
cancelled, no worker left); a child that fails at run time while the others succeed; a TPE sweep driven by the
scheduler's tick, each proposal inside its bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from backend.api import StudioAPI
from backend.jobs.records import JobStatus
from tests.helpers import ROOT, wait_for
from tests.integration.test_lifecycle import _gone, _wait_training

pytestmark = pytest.mark.slow

# examples/sft-demo.yaml cut to seconds a child: 40 steps and 64 held-out rows still tell 1e-6 (no change) from 5e-3
# (improved) on the tiny model.
SWEEP_SPEC = {
    "method": "sft",
    "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
    "dataset": {"source": "builtin", "name": "arith-sft"},
    "lora": {"r": 16, "alpha": 32},
    "training": {"max_steps": 40, "learning_rate": 2e-3, "batch_size": 16, "max_length": 128, "save_steps": 40},
    "eval": {"holdout_rows": 64},
    "output": {"run_name": "sweep-test"},
}
TINY = {
    **SWEEP_SPEC,
    "training": {**SWEEP_SPEC["training"], "max_steps": 4, "save_steps": 4},
    "eval": {"holdout_rows": 16},
}
LONG = {**SWEEP_SPEC, "training": {**SWEEP_SPEC["training"], "max_steps": 100000, "save_steps": 100000}}


def _ended(api: StudioAPI, sweep_id: str, timeout: float = 600):
    return wait_for(lambda: (r := api.sweeps.get(sweep_id)).finished and r, timeout, interval=0.5, what="the sweep")


def test_a_learning_rate_sweep_from_the_cli_picks_the_child_that_learned_most(data_dir, tmp_path):
    spec_file = tmp_path / "sweep.yaml"
    spec_file.write_text(yaml.safe_dump(SWEEP_SPEC))
    result = subprocess.run(
        [sys.executable, "-m", "backend", "sweep", str(spec_file), "--vary", "training.learning_rate=1e-6,1e-3,5e-3"]
        + ["--wait", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["sweep"]["status"] == "succeeded" and data["sweep"]["search"] == "grid"
    children = data["children"]
    assert [c["params"]["training.learning_rate"] for c in children] == [1e-6, 1e-3, 5e-3]
    assert all(c["status"] == "succeeded" and c["value"] is not None for c in children)
    verdicts = [c["verdict"] for c in children]
    assert verdicts[0] == "no_change" and verdicts[2] == "improved", verdicts  # 1e-6 moves nothing; 5e-3 learns
    best = max(children, key=lambda c: c["value"])
    assert data["best"]["id"] == best["id"] and best["best"] and sum(c["best"] for c in children) == 1
    assert best["params"]["training.learning_rate"] != 1e-6


def test_cancelling_a_sweep_mid_way_cancels_every_child_and_leaves_no_worker(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    report = api.sweeps.submit(LONG, ["training.learning_rate=1e-4,5e-4,1e-3"]).report
    first = report.children[0].child.job_id
    scheduler_factory()
    _wait_training(store, first)
    pid = store.get(first).pid
    api.sweeps.cancel(report.sweep.id)
    done = _ended(api, report.sweep.id, timeout=120)
    assert done.status == "cancelled"
    assert [c.job.status for c in done.children] == [JobStatus.cancelled] * 3
    assert done.children[0].job.cancelled_at_step and all(c.job.started_at is None for c in done.children[1:])
    wait_for(lambda: _gone(pid), 30, what="the cancelled child's worker to exit")


def test_a_child_that_fails_at_run_time_stops_none_of_the_others(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    # A built-in dataset's name is checked when the worker loads it: the spec validates, the child fails there.
    report = api.sweeps.submit(TINY, ["dataset.name=no-such-dataset,arith-sft"]).report
    scheduler_factory()
    done = _ended(api, report.sweep.id)
    failed, good = done.children
    assert failed.job.status is JobStatus.failed and failed.job.error and failed.value is None
    assert good.job.status is JobStatus.succeeded and good.value is not None
    assert done.status == "succeeded" and done.best is good


def test_a_tpe_sweep_is_driven_by_the_scheduler_inside_its_bounds(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    report = api.sweeps.submit(TINY, ["training.learning_rate=1e-4..1e-2"], "tpe", 2).report
    scheduler_factory()
    started = time.monotonic()
    done = _ended(api, report.sweep.id)
    assert time.monotonic() - started < 600
    assert len(done.children) == 2 and done.status == "succeeded"
    assert all(1e-4 <= c.job.spec.training.learning_rate <= 1e-2 for c in done.children)
    assert all(c.child.told for c in done.children) and done.best is not None
    assert (paths.root / "sweeps" / "optuna.db").is_file()
