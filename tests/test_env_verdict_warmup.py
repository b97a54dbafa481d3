"""An environment job's verdict and warm-up (issue 37): the verdict names the change in tool use beside the success
rate, and the warm-up's demonstrations are ones the environment rewarded."""

from __future__ import annotations

import yaml

from backend.core.spec import parse_spec
from backend.models.scoring import PER_ROW
from backend.training.evaluation import learning_verdict
from tests.conftest import ROOT


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
