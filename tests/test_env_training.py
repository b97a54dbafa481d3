"""GRPO with OpenEnv environments through the real queue: SFT on tool-call demonstrations, then GRPO against the
built-in echo server; dry runs; the server's lifecycle with the job; a dead server failing the job; spec and
pre-flight refusals."""

import json
import os
import signal
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from backend.api import StudioAPI
from backend.environments.launcher import start_server_process
from backend.spec import SpecError, parse_spec
from backend.store import JobStatus
from tests.conftest import ROOT, tiny_spec, wait_for, wait_status

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}

# Enough SFT for the tiny model to write `<tool_call>{"name": "echo_message", ...}</tool_call>` (loss ~0.1).
SFT_TOOL_CALLS = {
    "method": "sft", "dataset": {"source": "builtin", "name": "echo-tools-sft"}, "lora": {"r": 16, "alpha": 32},
    "training": {"max_steps": 200, "batch_size": 4, "max_length": 512, "learning_rate": 1e-2, "save_steps": 1000},
}


def grpo_env(env: str, dataset: dict, **overrides) -> dict:
    spec = {
        "method": "grpo", "dataset": dataset,
        "environment": {"name": env, "eval_episodes": 4},
        "grpo": {"num_generations": 4, "max_completion_length": 96, "temperature": 0.5},
        "training": {"max_steps": 3, "batch_size": 4, "max_length": 512, "learning_rate": 1e-4, "save_steps": 1000},
    }
    for key, value in overrides.items():
        spec[key] = {**spec.get(key, {}), **value}
    return tiny_spec(**spec)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not a running server.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def sft_tool_job(tmp_path_factory, models_dir):
    """One SFT job on echo tool-call demonstrations, shared by the tests that continue from it."""
    root = tmp_path_factory.mktemp("envdata")
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    api = StudioAPI(root, scheduler="thread", poll_interval=0.1)
    try:
        job = api.submit(tiny_spec(**SFT_TOOL_CALLS)).job
        done = wait_status(api.store, job.id, FINAL, timeout=400)
        assert done.status is JobStatus.succeeded, done.error
        yield api, done
    finally:
        api.close()


@pytest.mark.slow
def test_sft_then_grpo_against_the_builtin_echo_server_calls_tools_and_trains_on_its_reward(sft_tool_job):
    api, sft = sft_tool_job
    grpo = api.submit(grpo_env("builtin:echo", {"source": "builtin", "name": "echo-demo"},
                               model={"parent_job_id": sft.id})).job
    done = wait_status(api.store, grpo.id, FINAL, timeout=400)
    assert done.status is JobStatus.succeeded, done.error

    rows = api.metrics(grpo.id)
    calls = [r["tools/call_frequency"] for r in rows if "tools/call_frequency" in r]
    assert calls and max(calls) > 0, f"the model never called a tool: {calls}"
    assert any("tools/failure_frequency" in r for r in rows)
    env_rewards = [r["rewards/EchoEnv/mean"] for r in rows if "rewards/EchoEnv/mean" in r]
    assert len(env_rewards) == 3, "the environment's reward is logged every step"
    assert "echo" in done.artifacts["environment"] and "echo_message" in done.artifacts["environment"]

    # The adapter was saved and moved away from the SFT adapter it started from.
    start = load_file(f"{sft.artifacts['adapter_dir']}/adapter_model.safetensors")
    trained = load_file(f"{done.artifacts['adapter_dir']}/adapter_model.safetensors")
    assert start.keys() == trained.keys()
    if any(r["frac_reward_zero_std"] < 1 for r in rows if "frac_reward_zero_std" in r):
        # Some group's episodes scored differently, so there was an advantage to follow: the adapter moved.
        assert any(not torch.equal(start[k], trained[k]) for k in start)

    # Sampled episodes are kept with the environment's reward.
    samples = api.store.samples(grpo.id)
    assert samples and all("EchoEnv" in s["rewards"] for s in samples)
    assert any(m.get("tool_calls") for s in samples for m in s["completion"]), "a kept sample shows a tool call"

    # Success rate of base and tuned over the same seeded episodes.
    result = done.artifacts["environment_evaluation"]
    assert result["episodes"] == 4 and set(result) >= {"base", "tuned"}
    for side in ("base", "tuned"):
        assert 0.0 <= result[side]["success_rate"] <= 1.0 and "mean_reward" in result[side]
    assert result["tuned"]["tool_calls_per_episode"] > result["base"]["tool_calls_per_episode"]

    # The built-in server the job started is gone with it.
    assert not _alive(done.artifacts["environment_server_pid"])


@pytest.mark.slow
def test_dry_run_of_the_sft_model_shows_the_tool_call_its_result_and_the_reward(sft_tool_job):
    api, sft = sft_tool_job
    # Near-greedy: the tiny model's tool calls are reliable only at a low temperature.
    spec = grpo_env("builtin:echo", {"source": "builtin", "name": "echo-demo"}, model={"parent_job_id": sft.id},
                    grpo={"temperature": 0.05})
    episode = api.dry_run(spec, row=0, seed=0)
    assert episode.messages[0]["content"].endswith("attempts_left: 3"), "the reset observation joins the prompt"
    calls = [m for m in episode.turns if m.get("tool_calls")]
    results = [m for m in episode.turns if m["role"] == "tool"]
    assert calls and results and results[0]["name"] == "echo_message"
    assert episode.tool_calls >= 1 and episode.reward in (0.0, 1.0)
    assert episode.success == (episode.reward == 1.0)
    text = episode.transcript()
    assert "calls `echo_message`" in text and "**tool `echo_message`**" in text and "reward" in text


def test_dry_run_transcript_for_the_word_game(paths):
    api = StudioAPI(paths.root, scheduler="none")
    spec = grpo_env("builtin:wordle", {"source": "builtin", "name": "wordle-demo"},
                    grpo={"max_completion_length": 48})
    episode = api.dry_run(spec, row=3, seed=1)
    prompt = episode.messages[episode.prompt_messages - 1]["content"]
    assert "guesses_left: 6" in prompt and "Guess the secret 5-letter word" in prompt
    assert episode.reward == 0.0 and not episode.success
    assert episode.completion_tokens <= 48
    assert episode.stop_reason
    text = episode.transcript()
    assert text.startswith("**user** (prompt)") and "**assistant**" in text and "reward 0" in text
    assert api.list_jobs() == [], "a dry run queues nothing"


def test_the_builtin_server_dies_with_a_killed_worker(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.submit(grpo_env("builtin:arithmetic", {"source": "builtin", "name": "arithmetic-demo"},
                              training={"max_steps": 400}, grpo={"max_completion_length": 32})).job
    scheduler = scheduler_factory()
    running = wait_for(lambda: (j := store.get(job.id)).artifacts.get("environment_server_pid") and j, 180,
                       what="the environment server to start")
    server_pid = running.artifacts["environment_server_pid"]
    assert _alive(server_pid)
    worker_pid = wait_for(lambda: store.get(job.id).pid, 60, what="the worker pid")
    os.killpg(worker_pid, signal.SIGKILL)
    wait_for(lambda: not _alive(server_pid), 20, what="the environment server to die with its worker")
    scheduler.stop()


@pytest.fixture()
def counter_server(tmp_path):
    server = start_server_process(
        [sys.executable, str(ROOT / "tests" / "env_servers" / "counter_server.py"), "--max-sessions", "16"],
        name="counter", log_dir=tmp_path,
    )
    yield server
    server.stop()


def test_a_dead_environment_server_fails_the_job_with_a_clear_error(paths, store, scheduler_factory, counter_server,
                                                                     tmp_path):
    data = tmp_path / "counter.jsonl"
    data.write_text("".join(
        json.dumps({"prompt": [{"role": "user", "content": f"Reach {t} with the counter tool."}], "target": t}) + "\n"
        for t in range(3, 11)
    ))
    api = StudioAPI(paths.root, scheduler="none")
    job = api.submit(grpo_env(counter_server.url, {"source": "file", "name": str(data)},
                              training={"max_steps": 400}, grpo={"max_completion_length": 24},
                              environment={"eval_episodes": 0})).job
    scheduler_factory()
    wait_for(lambda: store.get(job.id).progress and store.get(job.id).progress.get("step", 0) >= 1, 240,
             what="training to start")
    counter_server.stop()
    started = time.monotonic()
    done = wait_status(store, job.id, FINAL, timeout=120)
    assert done.status is JobStatus.failed
    assert "environment server" in done.error and counter_server.url in done.error, done.error
    assert time.monotonic() - started < 90, "a dead server must fail the job, not hang it"


def test_environment_spec_rules():
    with pytest.raises(SpecError, match="only used by GRPO"):
        parse_spec(tiny_spec(environment={"name": "builtin:echo"}))
    with pytest.raises(SpecError, match=r"unknown built-in environment.*\(got 'builtin:chess'\)"):
        parse_spec(grpo_env("builtin:chess", {"source": "builtin", "name": "echo-demo"}))
    with pytest.raises(SpecError, match="is not an environment"):
        parse_spec(grpo_env("not an env", {"source": "builtin", "name": "echo-demo"}))
    spec = parse_spec(grpo_env("openenv/echo_env", {"source": "builtin", "name": "echo-demo"}))
    assert spec.grpo.rewards == [] and spec.environment.reward == "success"
    with pytest.raises(SpecError, match="at least one reward function"):
        parse_spec(tiny_spec(method="grpo", grpo={"num_generations": 2, "rewards": []}))


def test_submit_refuses_an_unreachable_environment_and_warns_about_a_short_episode_budget(paths, counter_server):
    api = StudioAPI(paths.root, scheduler="none")
    with pytest.raises(SpecError) as err:
        api.submit(grpo_env("http://127.0.0.1:9", {"source": "builtin", "name": "echo-demo"}))
    assert "not reachable" in str(err.value)
    assert api.list_jobs() == []

    submitted = api.submit(grpo_env("builtin:wordle", {"source": "builtin", "name": "wordle-demo"},
                                    grpo={"max_completion_length": 64}))
    assert any("max_completion_length (64) is below a typical wordle episode" in w for w in submitted.warnings)
    assert any("parent_job_id" in w for w in submitted.warnings), "GRPO from scratch is advised to SFT first"
