"""Held-out environment tasks: the built-in environments' train and test splits (fixed, disjoint, no test task a row
of a shipped dataset), what the form and the facade say of an environment's splits, and the verdict's sentence on
whether the evaluation's episodes were held out."""

from __future__ import annotations

import json

import pytest

from backend.api import StudioAPI
from backend.core.paths import BUILTIN_DATASETS_DIR
from backend.core.spec import SpecError, parse_spec
from backend.environments.builtin.registry import BUILTIN_ENVIRONMENTS
from backend.environments.builtin.splits import BUILTIN_SPLITS, SPLITS, builtin_splits, reset_arguments
from backend.environments.tasks import FROM_TEST_SPLIT, TaskCatalog, TaskSplit, task_row
from backend.training.evaluation import learning_verdict
from components.train.splits_note import splits_markdown
from tests.helpers import tiny_spec


def _key(task: dict) -> str:
    return json.dumps(reset_arguments(task), sort_keys=True)


@pytest.mark.parametrize("name", list(BUILTIN_ENVIRONMENTS))
def test_builtin_splits_are_fixed_disjoint_and_hold_out_no_shipped_row(name):
    splits = builtin_splits(name)
    train, test = {_key(t) for t in splits.train}, {_key(t) for t in splits.test}
    assert len(train) == len(splits.train) and len(test) == len(splits.test) >= 8, "no task twice"
    assert not train & test, "a task is in both splits"
    shipped = BUILTIN_DATASETS_DIR / f"{BUILTIN_ENVIRONMENTS[name].dataset}.jsonl"
    for line in shipped.read_text().splitlines():
        row = json.loads(line)
        assert not any(all(row.get(k) == v for k, v in reset_arguments(t).items()) for t in splits.test), row
    again = BUILTIN_SPLITS[name].__wrapped__()  # drawn afresh, not the cached draw
    assert again == splits, "the splits are drawn the same way every time"


def test_a_builtin_environment_poses_the_split_task_reset_names_and_the_dataset_row_path_still_works():
    from backend.environments.builtin.arithmetic import ArithmeticEnvironment

    env = ArithmeticEnvironment()
    task = env.get_task("test", 3)
    assert env.list_splits() == list(SPLITS) and env.num_tasks("test") == len(builtin_splits("arithmetic").test)
    assert env.reset(split="test", index=3).question == f"What is {task['a']} {task['op']} {task['b']}?"
    assert env.reset(a=17, b=25, op="-").question == "What is 17 - 25?", "a dataset row's reset(**row)"
    with pytest.raises(IndexError, match="tasks 0 to"):
        env.reset(split="test", index=10_000)
    with pytest.raises(ValueError, match="give split="):
        env.reset(index=3)


def test_a_test_task_is_played_from_its_own_prompt():
    assert task_row({"prompt": [{"role": "user", "content": "Echo: paper boat"}], "target": "x"}, "test", 2) == {
        "prompt": [{"role": "user", "content": "Echo: paper boat"}],
        "split": "test",
        "index": 2,
    }


def test_the_facade_lists_a_builtin_environments_splits_and_the_form_says_what_the_evaluation_plays(tmp_path):
    api = StudioAPI(tmp_path, scheduler="none")
    try:
        catalog = api.environments.splits("builtin:arithmetic")
        assert catalog is not None and catalog.test_split() is not None
        note = splits_markdown(catalog)
        assert f"test ({len(builtin_splits('arithmetic').test)} tasks)" in note and "held out from training" in note
        with pytest.raises(SpecError, match="no built-in environment 'chess'"):
            api.environments.splits("builtin:chess")
    finally:
        api.close()
    assert "not held out" in splits_markdown(None)
    no_test = TaskCatalog("x", (TaskSplit("train", "train", 5),))
    assert "No test split" in splits_markdown(no_test) and no_test.test_split() is None


def _environment_evaluation(**source) -> dict:
    per_side = {"success": [1.0, 0.0, 1.0, 0.0]}
    return {
        "episodes": 4,
        **source,
        "tuned": {"success_rate": 0.5, "tool_calls_per_episode": 1.0},
        "base": {"success_rate": 0.5, "tool_calls_per_episode": 1.0},
        "per_row": {"tuned": per_side, "base": per_side},
    }


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ({"episodes_from": FROM_TEST_SPLIT, "held_out": True, "split": "test"}, "held-out 'test' split"),
        ({"episodes_from": "training rows", "held_out": False, "split": None}, "were not held out: the environment"),
        ({"episodes_from": "held-out rows", "held_out": False, "split": None}, "were not held out by the environment"),
    ],
)
def test_the_verdict_says_whether_the_episodes_were_held_out(source, said):
    spec = parse_spec(
        tiny_spec(
            method="grpo",
            dataset={"source": "builtin", "name": "arithmetic-demo"},
            environment={"name": "builtin:arithmetic"},
            rollout={"num_generations": 2},
        )
    )
    learning = learning_verdict(spec, None, _environment_evaluation(**source))
    assert learning is not None and said in learning.sentence and said in learning.method_sentence


def test_an_environment_that_cannot_be_reached_is_a_sentence_not_no_splits(tmp_path):
    api = StudioAPI(tmp_path, scheduler="none")
    try:
        with pytest.raises(SpecError, match="not reachable"):
            api.environments.splits("http://127.0.0.1:9")
        with pytest.raises(SpecError, match="environment.name"):
            api.environments.splits("not an environment")
    finally:
        api.close()
