"""The learnability forecast: its rules on figures, and real forecasts of the arithmetic model through the job's own
rollout in a worker (a forecast-only job, a job it stops, one trained anyway, and training left as it would be)."""

import json
import threading

import pytest

from backend.core.forecasts import LEARNABLE, NO_SIGNAL, WEAK, forecast_prompts, group_spread, judge
from backend.jobs.records import JobStatus
from backend.worker import run_job
from tests.helpers import tiny_spec

ARITH = "builtin:tiny-qwen3-arith"


def _stats(**given):
    stats = {
        "prompts": 16,
        "completions": 128,
        "groups_with_spread": 0,
        "spread": 0.0,
        "reward_floor": 0.0,
        "reward_ceiling": 1.0,
        "clipped": 0.0,
        "max_completion_length": 24,
        "tool_calls_per_episode": None,
        "episode_tokens": None,
        "reward_model_best_right": None,
        "random_pick_right": None,
    }
    return {**stats, **given}


@pytest.mark.parametrize(
    ("stats", "environment", "word", "cause", "path"),
    [
        # answers cut at the length: raise it
        (
            _stats(clipped=0.9, reward_ceiling=0.0),
            False,
            NO_SIGNAL,
            "cut at 24 tokens",
            "rollout.max_completion_length",
        ),
        # an environment whose episodes end before a tool call can: raise the length to an episode's
        (
            _stats(tool_calls_per_episode=0.0, episode_tokens=96, reward_ceiling=0.0),
            True,
            NO_SIGNAL,
            "never called a tool within 24 tokens",
            "rollout.max_completion_length",
        ),
        # a model that never calls the tools at a length that holds an episode: warm up first
        (
            _stats(tool_calls_per_episode=0.0, episode_tokens=96, max_completion_length=96, reward_ceiling=0.0),
            True,
            NO_SIGNAL,
            "never called a tool",
            None,
        ),
        # a reward every answer earns
        (
            _stats(reward_floor=1.0, reward_ceiling=1.0),
            False,
            NO_SIGNAL,
            "every answer earned the same",
            "rollout.rewards",
        ),
        # a reward no answer earns
        (_stats(reward_ceiling=0.0), False, NO_SIGNAL, "no answer earned any reward", None),
        # groups alike inside, different across: sampling too cold
        (_stats(), False, NO_SIGNAL, "each group's answers scored alike", "rollout.temperature"),
        # tools called, no episode different yet: not certain, weak, and nothing it saw names a change
        (_stats(tool_calls_per_episode=0.1, reward_ceiling=0.0), True, WEAK, "no group of 16", None),
        # ... and a random model babbling to the limit: not a measured episode length, said as an upper figure
        (
            _stats(tool_calls_per_episode=0.0, episode_tokens=256, clipped=0.97, max_completion_length=96),
            True,
            NO_SIGNAL,
            "within 96 tokens (episodes here take up to 256; 97% of the answers ran to the limit)",
            "rollout.max_completion_length",
        ),
        # one group in twenty: weak
        (_stats(prompts=20, groups_with_spread=1, spread=0.05), False, WEAK, "only 1 of 20", "rollout.temperature"),
        # a reward model whose favourite answer is right no more often than a random one
        (
            _stats(groups_with_spread=9, spread=0.56, reward_model_best_right=0.3, random_pick_right=0.4),
            False,
            WEAK,
            "no more often than a random answer",
            "rollout.rewards",
        ),
        (_stats(groups_with_spread=6, spread=0.375), False, LEARNABLE, "enough groups", None),
        # two groups of two, both different: too few prompts to promise anything (the warm-up demo's GRPO stage)
        (_stats(prompts=2, groups_with_spread=2, spread=1.0), True, WEAK, "2 prompts are too few to promise", None),
    ],
)
def test_each_cause_gets_its_forecast_and_first_change(stats, environment, word, cause, path):
    said = judge(stats, environment, temperature=0.7, num_generations=8)
    assert said["forecast"] == word
    assert cause in said["cause"]
    change = said["change"]
    if word == LEARNABLE:
        assert change is None
    else:
        assert (change.path if change is not None else None) == path, change


def test_the_forecast_takes_at_most_a_tenth_of_the_job():
    assert forecast_prompts(16, job_prompts=600, dataset_rows=5000) == 16
    assert forecast_prompts(16, job_prompts=80, dataset_rows=5000) == 8  # grpo-env-demo: 40 steps x 2 prompts
    assert forecast_prompts(16, job_prompts=None, dataset_rows=5) == 5
    assert group_spread([0, 0, 1, 0, None, None], 2) == (3, 1)


def _grpo(**overrides):
    spec = tiny_spec(
        method="grpo",
        model={"name_or_path": ARITH},
        dataset={"source": "builtin", "name": "arith-prompts"},
        rollout={"num_generations": 8, "max_completion_length": 24, "temperature": 0.7},
        training={"max_steps": 40, "batch_size": 16, "max_length": 128, "save_steps": 40, "learning_rate": 1e-3},
        eval={"holdout_rows": 16},
        lora={"dropout": 0.0},
    )
    spec["rollout"]["rewards"] = [{"name": "accuracy", "weight": 1.0}]
    for part, values in overrides.items():
        spec[part] = {**spec.get(part, {}), **values}
    return spec


def _run(api, spec):
    job = api.jobs.submit(spec).job
    assert api.core.store.claim_next().id == job.id
    run_job(job.id, api.core.paths, threading.Event())
    return api.jobs.get_job(job.id)


@pytest.fixture(scope="module")
def module_api(tmp_path_factory):
    from backend.api import StudioAPI

    api = StudioAPI(tmp_path_factory.mktemp("forecast"), scheduler="none")
    yield api
    api.close()


def test_the_arithmetic_model_is_learnable_and_a_forecast_only_job_trains_nothing(module_api):
    job = _run(module_api, _grpo(forecast={"only": True, "prompts": 8}))
    forecast = job.artifacts.forecast
    assert job.status is JobStatus.succeeded and job.spec.kind == "forecast"
    assert forecast.forecast == LEARNABLE, forecast.sentence()
    assert forecast.prompts == 8 and forecast.completions == 64 and forecast.groups_with_spread >= 1
    assert forecast.reward_floor == 0.0 and forecast.reward_ceiling == 1.0 and forecast.clipped < 0.5
    assert forecast.samples and all("=" in s.completion for s in forecast.samples)  # the model's worked sums
    assert forecast.seconds < 60
    assert job.artifacts.adapter_dir is None and job.artifacts.learning is None  # nothing trained, nothing judged


def test_a_reward_every_answer_earns_stops_the_job_before_training(module_api):
    every = {"rewards": [{"name": "regex", "pattern": r"\d", "weight": 1.0}]}
    job = _run(module_api, _grpo(rollout=every, forecast={"prompts": 4}))
    forecast = job.artifacts.forecast
    assert forecast.forecast == NO_SIGNAL and forecast.stopped
    assert "every answer earned the same reward (1)" in forecast.cause
    assert forecast.change.path == "rollout.rewards"
    assert job.status is JobStatus.succeeded and job.artifacts.learning.verdict == "no_signal"
    assert "stopped before training" in job.artifacts.learning.sentence
    assert job.artifacts.adapter_dir is None and not module_api.jobs.metrics(job.id)  # not one step


def test_answers_cut_short_name_the_length_and_train_anyway_trains(module_api):
    cut = _grpo(rollout={"max_completion_length": 3}, forecast={"prompts": 2, "train_anyway": True})
    cut["training"] = {**cut["training"], "max_steps": 2, "save_steps": 2}
    job = _run(module_api, cut)
    forecast = job.artifacts.forecast
    assert forecast.forecast == NO_SIGNAL and not forecast.stopped and forecast.overridden
    assert "cut at 3 tokens" in forecast.cause and forecast.change.path == "rollout.max_completion_length"
    assert job.status is JobStatus.succeeded and job.artifacts.adapter_dir is not None  # trained anyway
    assert job.artifacts.global_step == 2


def test_the_forecast_leaves_training_exactly_as_it_would_have_been(module_api):
    """The random state, the model's mode and the logs are put back: the same job trains to the same numbers."""
    runs = []
    for prompts in (0, 2):
        spec = _grpo(forecast={"prompts": prompts}, eval={"holdout_rows": 4})
        spec["training"] = {**spec["training"], "max_steps": 2, "save_steps": 2, "logging_steps": 1}
        job = _run(module_api, spec)
        assert (job.artifacts.forecast is None) == (prompts == 0)
        rows = [m for m in module_api.jobs.metrics(job.id) if "loss" in m]
        runs.append([(m["step"], m["reward"], m["reward_std"], m["loss"]) for m in rows])
    assert runs[0] and runs[0] == runs[1]


@pytest.mark.slow
def test_the_cli_prints_the_forecast_and_exits_3_on_no_signal(data_dir, tmp_path, capsys):
    from backend.cli import main

    spec = _grpo(rollout={"rewards": [{"name": "regex", "pattern": r"\d", "weight": 1.0}]})
    spec["forecast"] = {"prompts": 2}
    path = tmp_path / "every.json"
    path.write_text(json.dumps(spec))
    assert main(["forecast", str(path), "--json"]) == 3
    said = json.loads(capsys.readouterr().out)
    assert said["status"] == "succeeded" and said["forecast"]["forecast"] == NO_SIGNAL
    assert said["forecast"]["prompts"] == 2


def _env(**overrides):
    spec = _grpo(dataset={"source": "builtin", "name": "arith-env"}, rollout={"max_completion_length": 96})
    spec["rollout"]["rewards"] = []
    spec["environment"] = {"name": "builtin:arithmetic", "reward": "success", "max_tool_calling_iterations": 1}
    spec["forecast"] = {"only": True, "prompts": 2}
    for part, values in overrides.items():
        spec[part] = {**spec.get(part, {}), **values}
    return spec


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "cause", "change"),
    [
        # the arithmetic model works its sum out in text and is cut before it can call submit_answer
        ({"rollout": {"max_completion_length": 24}}, "never called a tool within 24 tokens", "raise"),
        # the random demo model never calls a tool, even given a whole episode's tokens: warm it up first
        (
            {"model": {"name_or_path": "builtin:tiny-qwen3"}, "rollout": {"max_completion_length": 256}},
            "the model never called a tool",
            "warm up first",
        ),
    ],
)
def test_an_environment_the_model_never_calls_is_no_signal_with_its_cause(module_api, overrides, cause, change):
    job = _run(module_api, _env(**overrides))
    forecast = job.artifacts.forecast
    assert forecast.forecast == NO_SIGNAL and cause in forecast.cause, forecast.sentence()
    assert forecast.tool_calls_per_episode == 0 and forecast.completions == 16
    assert forecast.change.action == change


@pytest.mark.slow
def test_a_reward_models_favourite_is_weighed_against_a_random_pick(module_api):
    """A reward job with a random score head on arithmetic answers: the forecast counts how often its best-scored
    answer is right, against the group's share of right answers, and judges by the rule."""
    from backend.core.forecasts import RM_MARGIN
    from tests.unit.methods.test_reward_model_reward import _save_score_adapter

    paths, store = module_api.core.paths, module_api.core.store
    reward = store.add(module_api.core.prepare(tiny_spec(method="reward", dataset={"name": "preferences-demo"})))
    assert store.claim_next().id == reward.id
    _save_score_adapter(paths, paths.job_adapter(reward.id))
    store.merge_artifacts(reward.id, {"adapter_dir": str(paths.job_adapter(reward.id))})
    store.finish(reward.id, JobStatus.succeeded)
    spec = _grpo(forecast={"only": True, "prompts": 8})
    spec["rollout"]["rewards"] = [{"model": reward.id, "weight": 1.0}]
    forecast = _run(module_api, spec).artifacts.forecast
    best, pick = forecast.reward_model_best_right, forecast.random_pick_right
    assert best is not None and 0 < pick < 1, forecast.sentence()
    assert (forecast.forecast == WEAK and "no more often than a random answer" in forecast.cause) == (
        best <= pick + RM_MARGIN
    )
    assert "the reward model's best answer right in" in forecast.figures()
