"""An environment job's verdict and warm-up (issue 37): the verdict names the change in tool use beside the success
rate, and the warm-up's demonstrations are ones the environment rewarded."""

from __future__ import annotations

import json

import yaml

from backend.core.spec import parse_spec
from backend.models.scoring import PER_ROW
from backend.training.evaluation import learning_verdict
from tests.helpers import ROOT


def _env_spec():
    return parse_spec(yaml.safe_load((ROOT / "examples" / "grpo-env-demo.yaml").read_text(encoding="utf-8")))


def test_a_no_change_environment_verdict_says_how_tool_use_changed():
    """Issue 37: reward 0 -> 0.12 and tool calls 0.1 -> 0.85 on the dashboard, yet the verdict said only "No change:
    0% -> 0% on 16 episodes"."""
    environment = {
        "episodes": 16,
        "base": {"success_rate": 0.0, "mean_reward": 0.0, "tool_calls_per_episode": 0.1},
        "tuned": {"success_rate": 0.0, "mean_reward": 0.0, "tool_calls_per_episode": 0.85},
        PER_ROW: {"base": {"success": [0.0] * 16}, "tuned": {"success": [0.0] * 16}},
    }
    learning = learning_verdict(_env_spec(), None, environment)
    assert learning.verdict == "no_change"
    assert "0% -> 0%" in learning.sentence and "on 16 episodes" in learning.sentence
    assert "tool calls per episode 0.1 -> 0.85" in learning.sentence
    assert learning.sentence.index("tool calls") < learning.sentence.index("No change the rows can tell")


def test_an_improved_environment_verdict_names_tool_use_from_where_the_job_started():
    environment = {
        "episodes": 64,
        "base": {"success_rate": 0.0, "tool_calls_per_episode": 0.0},
        "start": {"success_rate": 0.25, "tool_calls_per_episode": 0.5},
        "tuned": {"success_rate": 0.75, "tool_calls_per_episode": 1.0},
        PER_ROW: {
            "base": {"success": [0.0] * 64},
            "start": {"success": [1.0, 0.0, 0.0, 0.0] * 16},
            "tuned": {"success": [1.0, 1.0, 1.0, 0.0] * 16},
        },
    }
    learning = learning_verdict(_env_spec(), None, environment)
    assert learning.verdict == "improved"
    assert "25% -> 75%" in learning.sentence and "tool calls per episode 0.5 -> 1" in learning.sentence


def test_every_kept_arithmetic_warm_up_demonstration_earns_the_reward_when_replayed(tmp_path):
    """Issue 37: the warm-up's calls carried schema-valid but arbitrary answers, so SFT on them taught wrong sums
    (warm-up then GRPO: 2% success; GRPO alone: 26%). Each demonstration kept is replayed against the real built-in
    server, on the row it was written for: every one is right."""
    from backend.data.loading import load_training_dataset
    from backend.environments.runtime import open_environment
    from backend.environments.warmup import warmup_spec
    from backend.workflows.warmup import write_demonstrations

    spec = _env_spec()
    shown = write_demonstrations(spec, tmp_path, rows=16)
    kept = [json.loads(line) for line in (tmp_path / shown.upload_id).read_text().splitlines()]
    assert shown.rows == len(kept) == 16, shown.summary
    assert shown.summary == "16 demonstration episodes of submit_answer kept: the 16 of 16 the environment rewarded"
    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True, uploads_dir=tmp_path)
    by_prompt = {dataset[i]["prompt"][0]["content"]: dataset[i] for i in range(16)}
    with open_environment(spec, sessions=1) as active:
        env = active.factory()
        try:
            for demonstration in kept:
                user, call = demonstration["messages"][:2]
                row = next(r for text, r in by_prompt.items() if user["content"].startswith(text))
                env.reset(**row)
                arguments = call["tool_calls"][0]["function"]["arguments"]
                env.submit_answer(**arguments)
                assert sum(env.rewards) == 1.0, (row, arguments)
        finally:
            env._close()
    # The pretrained arith model warms up at a LoRA rate, not the random demo model's 200 steps at 1e-2.
    sft = warmup_spec(spec, shown.upload_id, shown.rows)
    assert sft["training"]["learning_rate"] < 1e-3 and sft["training"]["max_steps"] < 200


def test_unrewarded_demonstrations_are_left_out_and_counted():
    """Where some calls earn a reward and others do not, only the rewarded are kept, and the summary says how many of
    how many; where none does, all are kept as format demonstrations, and the summary says that too."""
    from backend.environments.warmup import Demonstrations

    assert Demonstrations([{}] * 3, 3, 0, ("guess",), 8).summary() == (
        "3 demonstration episodes of guess kept: the 3 of 8 the environment rewarded"
    )
    assert "show the tool-call format only" in Demonstrations([{}] * 8, 0, 0, ("guess",), 8).summary()
