"""GRPO with OpenEnv environments through the real queue: the example's warm-up (demonstrations written by the
built-in echo server, SFT on them) then GRPO against it; dry runs; the server's lifecycle with the job; a dead server
failing the job; spec and pre-flight refusals."""

import json
import os
import signal
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from backend.api import StudioAPI
from backend.core.spec import SpecError, load_spec_text, parse_spec
from backend.environments.launcher import start_server_process
from backend.jobs.records import JobStatus
from tests.helpers import ROOT, tiny_spec, wait_for, wait_status
from tests.helpers.env_servers import COUNTER_SERVER, write_counter_rows

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}


def grpo_env(env: str, dataset: dict, **overrides) -> dict:
    spec = {
        "method": "grpo",
        "dataset": dataset,
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


EXAMPLE = ROOT / "examples" / "warm-up-demo.yaml"


@pytest.fixture(scope="module")
def warmed(tmp_path_factory, models_dir):
    """The GRPO environment example, warmed up: demonstrations written by the built-in echo server, SFT on them,
    then the example's GRPO job from that adapter, queued together (the GRPO job waits for the SFT)."""
    root = tmp_path_factory.mktemp("envdata")
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    api = StudioAPI(root, scheduler="thread", poll_interval=0.1, max_concurrent=2)
    try:
        warm = api.environments.warm_up(load_spec_text(EXAMPLE.read_text(), EXAMPLE.name), rows=32)
        assert warm.grpo.job.spec.model.parent_job_id == warm.sft.job.id
        sft = wait_status(api.core.store, warm.sft.job.id, FINAL, timeout=400)
        assert sft.status is JobStatus.succeeded, sft.error
        yield api, warm, sft
    finally:
        api.close()


def test_the_warm_up_demonstrations_are_the_environments_own_answers_in_trls_tool_format(warmed):
    api, warm, sft = warmed
    assert warm.demonstrations == (
        "40 demonstration episodes of echo_message kept: the 40 of 40 the environment rewarded"
    )
    rows = [json.loads(line) for line in (api.core.paths.uploads("local") / warm.upload_id).read_text().splitlines()]
    assert len(rows) == 40, "32 to train on and 8 held out for the warm-up's verdict"
    first = rows[0]
    user, call, answer, closing = first["messages"]
    assert user["content"].endswith("attempts_left: 3"), "the prompt carries the reset observation, as in GRPO"
    arguments = call["tool_calls"][0]["function"]["arguments"]
    assert answer == {
        "role": "tool",
        "name": "echo_message",
        "content": f"{arguments['message']}\nreward: 1\nThe episode is over.",
    }
    assert closing == {"role": "assistant", "content": "Done."}
    # The tools column is what TRL hands the chat template during GRPO: the JSON schema of the tool methods.
    assert first["tools"][0]["function"]["name"] == "echo_message"
    assert set(first["tools"][0]["function"]["parameters"]["properties"]) == {"message"}
    assert sft.spec.training.max_steps == 200 and sft.spec.dataset.source == "upload"
    # Issue 37: the warm-up's verdict is scored on held-out demonstrations, guards and all, as every job's is.
    assert sft.spec.eval.holdout_rows == 8
    learning = sft.artifacts.learning
    assert learning is not None and learning.verdict in {"improved", "no_change", "worse"}, learning


@pytest.mark.slow
def test_the_example_warms_up_then_learns_from_the_environment(warmed):
    """examples/warm-up-demo.yaml demonstrates what it is named for: tool calls during training, groups that score
    differently, a LoRA that moves, and base vs tuned success rates."""
    api, warm, sft = warmed
    done = wait_status(api.core.store, warm.grpo.job.id, FINAL, timeout=400)
    assert done.status is JobStatus.succeeded, done.error

    rows = api.jobs.metrics(done.id)
    calls = [r["tools/call_frequency"] for r in rows if "tools/call_frequency" in r]
    assert calls and max(calls) > 0, f"the model never called a tool: {calls}"
    assert any("tools/failure_frequency" in r for r in rows)
    env_rewards = [r["rewards/EchoEnv/mean"] for r in rows if "rewards/EchoEnv/mean" in r]
    assert len(env_rewards) == 4, "the environment's reward is logged every step"
    zero_std = [r["frac_reward_zero_std"] for r in rows if "frac_reward_zero_std" in r]
    assert zero_std and min(zero_std) < 1, f"no group ever scored differently, nothing to learn: {zero_std}"
    assert "echo" in done.artifacts.environment and "echo_message" in done.artifacts.environment

    # The adapter was saved and moved away from the warm-up adapter it started from.
    start = load_file(f"{sft.artifacts.adapter_dir}/adapter_model.safetensors")
    trained = load_file(f"{done.artifacts.adapter_dir}/adapter_model.safetensors")
    assert start.keys() == trained.keys()
    assert any(not torch.equal(start[k], trained[k]) for k in start)

    # Sampled episodes are kept with the environment's reward.
    samples = api.core.store.samples(done.id)
    assert samples and all("EchoEnv" in s["rewards"] for s in samples)
    assert any(m.get("tool_calls") for s in samples for m in s["completion"]), "a kept sample shows a tool call"

    # Success rate of base and tuned over the same seeded episodes.
    result = done.artifacts.environment_evaluation
    assert result["episodes"] == 8 and set(result) >= {"base", "tuned"}
    for side in ("base", "tuned"):
        assert 0.0 <= result[side]["success_rate"] <= 1.0 and "mean_reward" in result[side]
        assert "tool_calls_per_episode" in result[side]
    # The evaluation plays echo's held-out test texts, which the warm-up never showed it: the tool calls above are
    # the training episodes' (on held-out texts the tiny warmed model may not call at all, and the verdict says so).
    assert result["episodes_from"] == "test split" and result["held_out"]

    # The built-in server the job started is gone with it.
    assert not _alive(done.artifacts.environment_server_pid)


@pytest.mark.slow
def test_dry_run_of_the_warmed_up_model_shows_the_tool_call_its_result_and_the_reward(warmed):
    api, _, sft = warmed
    # Near-greedy: the tiny model's tool calls are reliable only at a low temperature.
    spec = grpo_env(
        "builtin:echo",
        {"source": "builtin", "name": "echo-demo"},
        model={"parent_job_id": sft.id},
        grpo={"temperature": 0.05},
    )
    episode = api.environments.dry_run(spec, row=0, seed=0)
    assert episode.messages[0]["content"].endswith("attempts_left: 3"), "the reset observation joins the prompt"
    calls = [m for m in episode.turns if m.get("tool_calls")]
    results = [m for m in episode.turns if m["role"] == "tool"]
    assert calls and results and results[0]["name"] == "echo_message"
    assert episode.tool_calls >= 1 and episode.reward in (0.0, 1.0)
    assert episode.success == (episode.reward == 1.0)
    text = episode.transcript()
    assert "calls `echo_message`" in text and "**tool `echo_message`**" in text and "reward" in text


def test_the_arith_model_works_the_sum_out_but_seldom_submits_it_with_the_tool(paths):
    """examples/grpo-env-demo.yaml's starting point: in an episode the pre-trained model writes the sum in its answer
    format, and greedily never submits it with submit_answer (it was shown the tool in half of its episodes), but
    sampled at the example's temperature it sometimes does, so GRPO's groups mix episodes the environment hears and
    episodes it never does: GRPO's lesson is the tool. 64 sampled episodes, played 16 side by side."""
    from dataclasses import replace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.data import arith as arith_data
    from backend.data.loading import load_training_dataset
    from backend.environments.episodes import EpisodeSettings, play_episodes
    from backend.environments.runtime import open_environment
    from backend.models.demo import ARITH_MODEL_DIR

    model = AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR).eval()
    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    example = ROOT / "examples" / "grpo-env-demo.yaml"
    spec = parse_spec(load_spec_text(example.read_text(), example.name))
    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True)
    sampled = EpisodeSettings.from_spec(spec)  # the example's own sampling (T 0.7)
    with open_environment(spec, sessions=16) as environment:
        sessions = [environment.factory() for _ in range(16)]
        try:
            played = [
                e
                for first in range(0, 64, 16)
                for e in play_episodes(
                    model,
                    tokenizer,
                    sessions,
                    [dataset[i] for i in range(first, first + 16)],
                    sampled,
                    list(range(first, first + 16)),
                )
            ]
            greedy = play_episodes(
                model,
                tokenizer,
                sessions,
                [dataset[i] for i in range(16)],
                replace(sampled, temperature=0.0),
                list(range(16)),
            )
        finally:
            for session in sessions:
                session._close()
    submitted = [e for e in played if e.tool_calls]
    assert sum(arith_data.parse_answer(e.turns[0]["content"]) is not None for e in played) >= 60, [
        e.transcript() for e in played[:4]
    ]
    assert 1 <= len(submitted) <= 48, f"{len(submitted)} of 64 sampled episodes used the tool"
    assert sum(e.tool_calls for e in greedy) <= 4, "greedily it seldom submits"
    for episode in submitted:
        call = episode.turns[0]["tool_calls"][0]["function"]
        assert call["name"] == "submit_answer" and episode.tool_calls == 1, episode.transcript()
        assert arith_data.parse_answer(episode.turns[0]["content"]) == call["arguments"]["answer"]
    assert not any(e.success for e in played if not e.tool_calls), "an answer in text never reaches the server"
    print(f"sampled: {len(submitted)} of 64 episodes submitted, {sum(e.success for e in played)} right")


def test_dry_run_transcript_for_the_word_game(paths):
    api = StudioAPI(paths.root, scheduler="none")
    spec = grpo_env("builtin:wordle", {"source": "builtin", "name": "wordle-demo"}, grpo={"max_completion_length": 48})
    episode = api.environments.dry_run(spec, row=3, seed=1)
    prompt = episode.messages[episode.prompt_messages - 1]["content"]
    assert "guesses_left: 6" in prompt and "Guess the secret 5-letter word" in prompt
    assert episode.reward == 0.0 and not episode.success
    assert episode.completion_tokens <= 48
    assert episode.stop_reason
    text = episode.transcript()
    assert text.startswith("**user** (prompt)") and "**assistant**" in text and "reward 0" in text
    assert api.jobs.list_jobs() == [], "a dry run queues nothing"


def test_the_builtin_server_dies_with_a_killed_worker(paths, store, scheduler_factory, fresh_workers):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(
        grpo_env(
            "builtin:arithmetic",
            {"source": "builtin", "name": "arithmetic-demo"},
            training={"max_steps": 400},
            grpo={"max_completion_length": 32},
        )
    ).job
    scheduler = scheduler_factory()
    running = wait_for(
        lambda: (j := store.get(job.id)).artifacts.environment_server_pid and j,
        180,
        what="the environment server to start",
    )
    server_pid = running.artifacts.environment_server_pid
    assert _alive(server_pid)
    worker_pid = wait_for(lambda: store.get(job.id).pid, 60, what="the worker pid")
    os.killpg(worker_pid, signal.SIGKILL)
    wait_for(lambda: not _alive(server_pid), 20, what="the environment server to die with its worker")
    scheduler.stop()


@pytest.fixture()
def counter_server(tmp_path):
    server = start_server_process(
        [sys.executable, str(COUNTER_SERVER), "--max-sessions", "16"],
        name="counter",
        log_dir=tmp_path,
    )
    yield server
    server.stop()


def test_a_dead_environment_server_fails_the_job_with_a_clear_error(
    paths, store, scheduler_factory, counter_server, tmp_path
):
    data = write_counter_rows(tmp_path / "counter.jsonl")
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(
        grpo_env(
            counter_server.url,
            {"source": "file", "name": str(data)},
            training={"max_steps": 400},
            grpo={"max_completion_length": 24},
            environment={"eval_episodes": 0},
            forecast={"prompts": 0},  # the server dies under training, not under the forecast
        )
    ).job
    scheduler_factory()
    wait_for(
        lambda: store.get(job.id).progress and store.get(job.id).progress.get("step", 0) >= 1,
        240,
        what="training to start",
    )
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
    assert spec.rollout.rewards == [] and spec.environment.reward == "success"
    with pytest.raises(SpecError, match="at least one reward function"):
        parse_spec(tiny_spec(method="grpo", grpo={"num_generations": 2, "rewards": []}))


def test_submit_refuses_an_unreachable_environment_and_warns_about_a_short_episode_budget(paths, counter_server):
    api = StudioAPI(paths.root, scheduler="none")
    with pytest.raises(SpecError) as err:
        api.jobs.submit(grpo_env("http://127.0.0.1:9", {"source": "builtin", "name": "echo-demo"}))
    assert "not reachable" in str(err.value)
    assert api.jobs.list_jobs() == []

    submitted = api.jobs.submit(
        grpo_env("builtin:wordle", {"source": "builtin", "name": "wordle-demo"}, grpo={"max_completion_length": 64})
    )
    assert any("max_completion_length (64) is below a typical wordle episode" in w for w in submitted.warnings)
    assert any("parent_job_id" in w for w in submitted.warnings), "GRPO from scratch is advised to SFT first"


def test_evaluation_episodes_are_played_side_by_side_with_the_same_outcomes():
    """The success-rate evaluation plays up to ``sessions`` episodes at once, one batched generate per round of
    model turns: 16 greedy episodes of the arithmetic model cost a handful of generate calls instead of one per
    turn per episode, and every episode ends as it does when played alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.environments.episodes import EpisodeSettings, success_rates
    from backend.environments.runtime import open_environment
    from backend.models.demo import ARITH_MODEL_DIR

    model = AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR)
    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    calls = []
    generate = model.generate
    model.generate = lambda *a, **k: calls.append(k["input_ids"].shape[0]) or generate(*a, **k)
    spec = parse_spec(load_spec_text((ROOT / "examples" / "grpo-env-demo.yaml").read_text(), "grpo-env-demo.yaml"))
    from backend.data.loading import load_training_dataset

    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True)
    rows = [dataset[i] for i in range(16)]
    settings = EpisodeSettings.from_spec(spec)
    with open_environment(spec, sessions=8) as environment:
        alone = success_rates(model, tokenizer, environment.factory, rows, settings, 16, seed=3, compare_base=False)
        alone_calls, calls[:] = list(calls), []
        together = success_rates(
            model, tokenizer, environment.factory, rows, settings, 16, seed=3, compare_base=False, sessions=8
        )
    assert len(alone_calls) >= 16 and set(alone_calls) == {1}
    assert len(calls) <= 2 * (settings.max_iterations + 1) and max(calls) == 8, calls
    assert together["per_row"] == alone["per_row"], (alone["per_row"], together["per_row"])
    assert together["tuned"] == alone["tuned"]
