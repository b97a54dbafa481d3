"""Acceptance for agents in a real OpenEnv environment the studio did not write (issue 11): OpenEnv's grid_world_env,
served on 127.0.0.1 from the OpenEnv repository, reached by URL like any user's environment. The studio writes
tool-call demonstrations by playing it, SFT teaches the demo model the call, and GRPO from that adapter then calls
the environment's tool during training; a dry run of the warmed-up adapter shows the parsed call and the answer.
"""

from __future__ import annotations

import json
import re

import pytest

from backend.api import StudioAPI
from backend.jobs.records import JobStatus
from tests.helpers import tiny_spec, wait_status
from tests.helpers.openenv_envs import served_catalog_env

pytestmark = pytest.mark.slow

ENV = "grid_world_env"
FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}
PROMPTS = [
    "Reach the goal in the grid.",
    "Find your way to the goal.",
    "Move through the grid to the goal.",
    "Walk to the goal square.",
    "Head for the goal.",
    "Get to the goal.",
    "Go to the goal cell.",
    "Navigate to the goal.",
]


@pytest.fixture(scope="module")
def grid_world():
    with served_catalog_env(ENV) as server:
        yield server


def test_warm_up_then_grpo_by_url_calls_the_real_environment_and_logs_its_reward(grid_world, tmp_path, models_dir):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"{p} Use the grid_world tool."}) + "\n" for p in PROMPTS))
    spec = tiny_spec(
        method="grpo",
        dataset={"source": "file", "name": str(prompts)},
        environment={"name": grid_world.url, "reward": "sum", "max_tool_calling_iterations": 2, "eval_episodes": 2},
        grpo={"num_generations": 4, "max_completion_length": 160, "temperature": 0.7},
        training={"max_steps": 2, "batch_size": 4, "max_length": 512, "learning_rate": 1e-4, "save_steps": 100},
    )
    root = tmp_path / "data"
    root.mkdir()
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    api = StudioAPI(root, scheduler="thread", poll_interval=0.1, max_concurrent=2)
    try:
        warm = api.environments.warm_up(spec, rows=16, steps=120)
        assert re.fullmatch(
            r"\d+ demonstration episodes of \w+ kept: (the \d+ of 16 the environment rewarded|none earned a reward.*)",
            warm.demonstrations,
        )
        sft = wait_status(api.core.store, warm.sft.job.id, FINAL, timeout=400)
        assert sft.status is JobStatus.succeeded, sft.error
        grpo = wait_status(api.core.store, warm.grpo.job.id, FINAL, timeout=400)
        assert grpo.status is JobStatus.succeeded, grpo.error

        rows = api.jobs.metrics(grpo.id)
        calls = [r["tools/call_frequency"] for r in rows if "tools/call_frequency" in r]
        assert calls and max(calls) > 0, f"no tool call of the model reached the environment: {calls}"
        reward_keys = {k for r in rows for k in r if re.fullmatch(r"rewards/[A-Za-z]\w*/mean", k)}
        assert len(reward_keys) == 1, f"one environment reward column, named after the environment: {reward_keys}"
        column = reward_keys.pop()
        assert not re.search(r"\d{4,}", column), f"named after the server's name, not its host and port: {column}"
        assert sum(column in r for r in rows) == 2, "the environment's reward is logged every step"

        # The warmed-up adapter, played once: its call is parsed and the environment's answer comes back.
        episode = api.environments.dry_run(spec | {"model": {**spec["model"], "parent_job_id": sft.id}}, row=0, seed=0)
        calls = [m for m in episode.turns if m.get("tool_calls")]
        answers = [m for m in episode.turns if m["role"] == "tool"]
        assert calls and answers, episode.transcript()
        name = calls[0]["tool_calls"][0]["function"]["name"]
        assert answers[0]["name"] == name and "error" not in str(answers[0]["content"])[:20].lower()
        assert f"calls `{name}`" in episode.transcript()
    finally:
        api.close()
