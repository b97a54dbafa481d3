"""backend/training/prepared.py: a job prepared once per process and handed on whole. At submit and in the worker, each
job a spec names (a parent, a distillation teacher, a reward job) is read from the store once and the dataset loaded
once, and what the trainer is handed is what was prepared (issue 51: the teacher and the reward job were read twice
at submit)."""

from __future__ import annotations

import collections
import json
import threading

import pytest

import backend.data.loading
import backend.worker
from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.models.demo import ARITH_MODEL_DIR, ARITH_MODEL_ID
from tests.helpers import tiny_spec

ALICE = User("alice")
TRAINING = {"max_steps": 2, "batch_size": 4, "max_length": 128, "save_steps": 100}


def _finished(store: JobStore, paths, spec: dict, teaches: bool = False) -> str:
    """A job of alice's stored as succeeded without training: its adapter folder is there (for a teacher, with the
    arithmetic model's tokenizer and an adapter config naming it as the base, all a pre-flight reads of it)."""
    job = store.add(parse_spec(tiny_spec(owner="alice", **spec)))
    assert store.claim_next().id == job.id
    folder = paths.job_adapter(job.id)
    folder.mkdir(parents=True)
    if teaches:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(ARITH_MODEL_DIR).save_pretrained(folder)
        (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(ARITH_MODEL_DIR)}))
    assert store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(folder)})
    return job.id


def _spec(kind: str, named: str) -> dict:
    """A spec of ``kind`` naming the finished job ``named``."""
    if kind == "reward":
        rollout = {"num_generations": 4, "max_completion_length": 8, "rewards": [{"model": named}]}
        return tiny_spec(method="grpo", dataset={"name": "math-demo"}, rollout=rollout, training=TRAINING)
    if kind == "teacher":
        return tiny_spec(
            method="distillation",
            model={"name_or_path": ARITH_MODEL_ID},
            dataset={"name": "math-demo"},
            distillation={"teacher": named, "max_completion_length": 8},
            training=TRAINING,
        )
    return tiny_spec(model={"parent_job_id": named}, training=TRAINING)


class Counts:
    """The store's reads of each job id and the dataset's loads, counted while a test runs."""

    def __init__(self, monkeypatch) -> None:
        self.reads: collections.Counter[str] = collections.Counter()
        self.loads = 0
        read, load = JobStore.get, backend.data.loading._load_raw

        def counted_read(store, job_id):
            self.reads[job_id] += 1
            return read(store, job_id)

        def counted_load(*args, **kwargs):
            self.loads += 1
            return load(*args, **kwargs)

        monkeypatch.setattr(JobStore, "get", counted_read)
        monkeypatch.setattr(backend.data.loading, "_load_raw", counted_load)

    def reset(self) -> None:
        self.reads.clear()
        self.loads = 0


class TrainerWouldStart(Exception):
    """Raised where the worker builds the trainer: its preparation is done, nothing is trained."""


@pytest.mark.parametrize("kind", ["teacher", "reward", "parent"])
def test_a_named_job_is_read_once_and_the_dataset_loaded_once_at_submit_and_in_the_worker(paths, monkeypatch, kind):
    api = StudioAPI(paths.root, scheduler="none")
    store = api.core.store
    try:
        if kind == "reward":
            named = _finished(store, paths, {"method": "reward", "dataset": {"name": "preferences-demo"}})
        else:
            named = _finished(store, paths, {"model": {"name_or_path": ARITH_MODEL_ID}}, teaches=kind == "teacher")
        checked = []  # the reward model's check in its child, with where the model loads from: not run here
        monkeypatch.setattr(
            "backend.api.jobs.flat_group_warnings", lambda _, sources, *__: checked.append(sources) or []
        )
        counts = Counts(monkeypatch)
        job = api.jobs.submit(_spec(kind, named), user=ALICE).job
        assert counts.reads[named] == 1 and counts.loads == 1, (counts.reads, counts.loads)
        assert [sources[named].adapter for sources in checked] == (
            [paths.job_adapter(named)] if kind == "reward" else []
        )
    finally:
        api.close()

    assert store.claim_next().id == job.id
    handed = {}

    def build_trainer(spec, paths, job_id, callbacks, parent_adapter, data, environment=None, reward_models=None):
        handed.update(spec=spec, parent_adapter=parent_adapter, data=data, reward_models=reward_models)
        raise TrainerWouldStart

    monkeypatch.setattr(backend.worker, "build_trainer", build_trainer)
    counts.reset()
    backend.worker.run_job(job.id, paths, threading.Event())
    assert counts.reads[named] == 1 and counts.loads == 1, (counts.reads, counts.loads)
    assert "TrainerWouldStart" in store.get(job.id).error, "the worker stopped where it builds the trainer"
    adapter = paths.job_adapter(named)
    assert len(handed["data"].rows) > 0
    assert handed["parent_adapter"] == (adapter if kind == "parent" else None)
    if kind == "teacher":  # the stored id, read as that job's adapter folder
        assert handed["spec"].distillation.teacher == str(adapter)
        assert store.get(job.id).spec.distillation.teacher == named
    if kind == "reward":
        assert handed["reward_models"][named].adapter == adapter
