"""Held-out environment tasks against a real OpenEnv server reached by URL (the test-only counter server, which with
``--splits`` serves OpenEnv's Task API and with ``--record-resets`` writes down every reset it was asked for): a job
trains on its dataset's rows and is evaluated on the server's test split, a server without splits gets a verdict
that says its episodes were not held out, and the arena plays test task i."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.core.users import local_user
from backend.environments.launcher import start_server_process
from backend.jobs.records import JobStatus
from backend.worker import run_job
from backend.workflows.arena import ArenaError
from tests.helpers import tiny_spec
from tests.helpers.env_servers import COUNTER_SERVER, write_counter_rows

pytestmark = pytest.mark.slow

TEST_TARGETS = range(20, 28)  # the counter's test split (counter_server.TASKS)


def counter(tmp_path: Path, *flags: str):
    resets = tmp_path / "resets.jsonl"
    server = start_server_process(
        [sys.executable, str(COUNTER_SERVER), "--record-resets", str(resets), *flags], name="counter", log_dir=tmp_path
    )
    return server, resets


def recorded(resets: Path) -> list[dict]:
    return [json.loads(line) for line in resets.read_text().splitlines()] if resets.exists() else []


def counter_spec(url: str, tmp_path: Path, **environment) -> dict:
    data = write_counter_rows(tmp_path / "counter.jsonl")
    return tiny_spec(
        method="grpo",
        dataset={"source": "file", "name": str(data)},
        environment={"name": url, "eval_episodes": 3, "max_tool_calling_iterations": 2, **environment},
        rollout={"num_generations": 2, "max_completion_length": 24, "temperature": 0.7},
        training={"max_steps": 1, "batch_size": 2, "max_length": 256, "save_steps": 1000},
        forecast={"prompts": 0},  # the random model's forecast would stop it; the evaluation's episodes are tested
    )


def train(paths, store, spec: dict):
    job = store.add(parse_spec(spec))
    assert store.claim_next().id == job.id
    assert run_job(job.id, paths, threading.Event()) == 0
    done = store.get(job.id)
    assert done.status is JobStatus.succeeded, done.error
    return done


def test_a_url_environment_with_a_test_split_is_evaluated_on_it(paths, store, tmp_path):
    server, resets = counter(tmp_path, "--splits")
    try:
        done = train(paths, store, counter_spec(server.url, tmp_path))
    finally:
        server.stop()
    played = done.artifacts.environment_evaluation
    assert played is not None and "error" not in played, played
    assert (played["episodes_from"], played["held_out"], played["split"]) == ("test split", True, "test")
    assert played["task_indexes"] == [0, 1, 2]
    calls = recorded(resets)
    trained = [c for c in calls if c["split"] is None]
    evaluated = [c for c in calls if c["split"] is not None]
    assert trained and all(3 <= c["target"] <= 10 for c in trained), "training played the dataset's rows"
    assert {c["split"] for c in evaluated} == {"test"}
    # Every side (tuned, then base) played test tasks 0, 1 and 2, each with its own test target.
    assert sorted((c["index"], c["target"]) for c in evaluated) == sorted([(i, TEST_TARGETS[i]) for i in range(3)] * 2)
    assert calls.index(evaluated[0]) > calls.index(trained[-1]), "the test split is played after training only"
    learning = done.artifacts.learning
    assert learning is not None and "held-out 'test' split" in learning.sentence, learning
    # The dataset held no rows out: the drift answers the test tasks' prompts instead of going unmeasured.
    assert learning.drift is not None and learning.drift.mean is not None and learning.drift.rows >= 1, learning.drift


def test_a_url_environment_without_splits_gets_a_verdict_saying_its_episodes_were_not_held_out(paths, store, tmp_path):
    server, resets = counter(tmp_path)
    try:
        done = train(paths, store, counter_spec(server.url, tmp_path))
    finally:
        server.stop()
    played = done.artifacts.environment_evaluation
    assert (played["episodes_from"], played["held_out"], played["split"]) == ("training rows", False, None), played
    assert all(c["split"] is None for c in recorded(resets))
    learning = done.artifacts.learning
    assert learning is not None and "the episodes were not held out" in learning.sentence, learning


def test_the_arena_plays_test_task_i(data_dir, tmp_path):
    from tests.unit.chat.test_chat_tool_calls import build_tool_adapter, finished_job

    server, resets = counter(tmp_path, "--splits")
    api = StudioAPI(data_dir, scheduler="none")
    try:
        arith_model = {"model": {"name_or_path": "builtin:tiny-qwen3-arith"}}
        spec = parse_spec(counter_spec(server.url, tmp_path, eval_episodes=0) | arith_model)
        job_id = finished_job(api, spec, build_tool_adapter(tmp_path / "adapter", steps=5))
        user = local_user()
        listed = api.environments.splits(server.url, user)  # what the Train form shows beside the field
        assert listed is not None and listed.summary() == "train (15 tasks), test (8 tasks)"
        *_, last = api.arena.play(job_id, user, split="test", row=5, episodes=1)
        assert last.over and not last.note, last.note
        (pair,) = last.pairs
        assert (pair.split, pair.row, pair.index) == ("test", 5, 5)
        played = [c for c in recorded(resets) if c["split"] is not None]
        assert [(c["split"], c["index"], c["target"]) for c in played] == [("test", 5, TEST_TARGETS[5])] * 2
        with pytest.raises(ArenaError, match="holds tasks 0 to 7"):
            api.arena.play(job_id, user, split="test", row=8)
        with pytest.raises(ArenaError, match="no 'validation' split"):
            api.arena.play(job_id, user, split="validation")
    finally:
        api.close()
        server.stop()
