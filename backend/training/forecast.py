"""The learnability forecast, run: the starting model plays a few prompts through the job's own rollout.

The worker builds the job's trainer (its model, rewards, environment and generation settings) and, before the first
step, hands it here. Each batch of prompts goes through the trainer's own ``_generate_and_score_completions`` (TRL
1.16), the very call a training step makes: the same sampling, the same ``num_generations`` and
``max_completion_length``, the same tool rounds against the same environment and the same rewards. The trainer's
logs of those rollouts are read, then cleared; the random state, the model's mode and the token count are put back
as they were, so training goes on exactly as it would have without the forecast.

What the figures mean, and the forecast they make, is ``backend/core/forecasts.py``.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from backend.core.forecasts import (
    Forecast,
    ForecastSample,
    forecast_prompts,
    group_spread,
    judge,
    reward_model_picks,
)
from backend.core.spec import JobSpec

log = logging.getLogger("studio.forecast")

SAMPLES = 6  # completions kept for people to read
SAMPLE_CHARS = 600


def job_prompts(spec: JobSpec) -> int | None:
    """How many prompts the job's training plays: steps x completions per step / completions per prompt (None when
    the batch is not decided yet)."""
    if spec.training.batch_size == "auto":
        return None
    batch = spec.training.batch_size
    completions = spec.training.max_steps * batch * spec.training.gradient_accumulation_steps
    return max(1, completions // spec.rollout.num_generations)


def episode_tokens(spec: JobSpec) -> tuple[int, bool]:
    """The tokens an episode of the job's model in its environment takes, and whether that was measured: its
    measured recipe's, else the environment's typical episode (what pre-flight warns against, an upper figure)."""
    from backend.environments.runtime import typical_episode_tokens
    from backend.models.demo import environment_recipe

    measured = environment_recipe(spec.model.name_or_path, spec.method.value, spec.environment.name)
    recipe = measured.get("rollout.max_completion_length")
    return (int(recipe), True) if recipe else (typical_episode_tokens(spec), False)


def _text(value: Any) -> str:
    """A prompt or completion as text: a conversation's messages joined (tool calls and results included)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for message in value:
            if isinstance(message, dict):
                content = message.get("content")
                calls = message.get("tool_calls")
                parts.append(f"{message.get('role', '')}: {_text(content) if content is not None else ''}".strip())
                if calls:
                    parts.append(f"  tool calls: {calls}")
            else:
                parts.append(str(message))
        return "\n".join(parts)
    return "" if value is None else str(value)


def _last_message(prompt: Any) -> str:
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return _text(prompt[-1].get("content"))
    return _text(prompt)


class _Kept:
    """The trainer's state a rollout changes, kept to be put back: random generators, mode, tokens seen."""

    def __init__(self, trainer) -> None:
        import numpy as np
        import torch

        self.trainer = trainer
        self.python = random.getstate()
        self.numpy = np.random.get_state()
        self.torch = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self.training = trainer.model.training
        self.tokens = trainer.state.num_input_tokens_seen

    def restore(self) -> None:
        import numpy as np
        import torch

        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        self.trainer.model.train(self.training)
        self.trainer.state.num_input_tokens_seen = self.tokens
        clear_logs(self.trainer)
        for mode in ("train", "eval"):
            self.trainer._metrics[mode].clear()


def clear_logs(trainer) -> None:
    """Empty the trainer's logs of completions (what the samples table and TRL's printing read)."""
    for value in trainer._logs.values():  # deques, and dicts of deques (rewards, extra) that make them on demand
        if hasattr(value, "clear"):
            value.clear()


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _right(completions: list[Any], solutions: list[Any]) -> list[bool | None]:
    """Whether each completion is right by TRL's accuracy check, where its row has a solution (None where not)."""
    from backend.methods.rewards.accuracy_rewards import TRLReward

    have = [i for i, s in enumerate(solutions) if s not in (None, "")]
    right: list[bool | None] = [None] * len(completions)
    if not have:
        return right
    shaped = [completions[i] for i in have]
    scores = TRLReward("accuracy")(completions=shaped, solution=[solutions[i] for i in have])
    for i, score in zip(have, scores):
        right[i] = score == 1
    return right


def run_forecast(
    trainer,
    spec: JobSpec,
    prompts: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Forecast:
    """Play ``prompts`` prompts (``forecast.prompts`` by default, capped by :func:`forecast_prompts`) of the
    trainer's training data through its own rollout, and forecast whether training can learn from it."""
    started = time.monotonic()
    dataset = trainer.train_dataset
    group = trainer.num_generations
    count = forecast_prompts(spec.forecast.prompts if prompts is None else prompts, job_prompts(spec), len(dataset))
    rows = sorted(random.Random(spec.training.seed).sample(range(len(dataset)), count))
    world = trainer.accelerator.num_processes
    mine = rows[trainer.accelerator.process_index :: world]
    per_call = max(1, trainer.args.generation_batch_size // group // world)
    kept, played = _Kept(trainer), _Played()
    weights = [float(w) for w in trainer.reward_weights.tolist()]
    mode = "train"
    try:
        trainer.model.train()  # as a training step samples (dropout included)
        clear_logs(trainer)
        for mode_metrics in trainer._metrics.values():
            mode_metrics.clear()
        calls_made = math.ceil(len(mine) / per_call) if mine else 0
        for call in range(calls_made):
            batch = mine[call * per_call : (call + 1) * per_call]
            inputs = [dataset[i] for i in batch for _ in range(group)]
            trainer._generate_and_score_completions(inputs)
            logs = trainer._logs
            per_func = [list(logs["rewards"][name]) for name in trainer.reward_func_names]
            for k in range(len(logs["completion"])):
                values = [f[k] for f in per_func]
                scored = [(w, v) for w, v in zip(weights, values) if v is not None and not math.isnan(v)]
                played.totals.append(sum(w * v for w, v in scored) if scored else None)
            played.completions += list(logs["completion"])
            played.prompts += list(logs["prompt"])
            metrics = trainer._metrics[mode]
            played.clipped += metrics.get("completions/clipped_ratio", [])[-1:]
            played.calls += metrics.get("tools/call_frequency", [])[-1:]
            played.failures += metrics.get("tools/failure_frequency", [])[-1:]
            played.solutions += [dataset[i].get("solution") for i in _gathered(trainer, batch) for _ in range(group)]
            clear_logs(trainer)
            if progress is not None:
                progress(min(len(rows), (call + 1) * per_call * world), len(rows))
    finally:
        kept.restore()
    return _forecast(spec, group, played, time.monotonic() - started)


def _gathered(trainer, batch: list[int]) -> list[int]:
    """The dataset rows of one call on every process, in the order TRL gathers them (by process)."""
    if trainer.accelerator.num_processes == 1:
        return batch
    from accelerate.utils import gather_object

    return list(gather_object(list(batch)))


@dataclass
class _Played:
    """What the rollouts gave, a completion (or a batch, for the trainer's metrics) at a time."""

    totals: list[float | None] = field(default_factory=list)  # each completion's weighted reward (None: unscored)
    completions: list[Any] = field(default_factory=list)
    prompts: list[Any] = field(default_factory=list)
    solutions: list[Any] = field(default_factory=list)  # each completion's row's ``solution``, where rows have one
    clipped: list[float] = field(default_factory=list)  # per batch: share cut at max_completion_length
    calls: list[float] = field(default_factory=list)  # per batch: tool calls per episode
    failures: list[float] = field(default_factory=list)  # per batch: share of tool calls that failed


def _forecast(spec: JobSpec, group: int, played: _Played, seconds: float) -> Forecast:
    totals, calls, failures = played.totals, played.calls, played.failures
    groups, with_spread = group_spread(totals, group)
    scored = [t for t in totals if t is not None]
    environment = bool(spec.environment.name)
    per_episode = _mean(calls) if environment else None
    accepted = None
    if environment and per_episode:
        accepted = 1 - sum(c * f for c, f in zip(calls, failures)) / max(sum(calls), 1e-9)
    best = pick = None
    if any(r.model is not None for r in spec.rollout.rewards) and any(s not in (None, "") for s in played.solutions):
        best, pick = reward_model_picks(totals, _right(played.completions, played.solutions), group)
    stats: dict[str, Any] = {
        "prompts": groups,
        "completions": len(totals),
        "groups_with_spread": with_spread,
        "spread": with_spread / groups if groups else 0.0,
        "reward_floor": min(scored) if scored else None,
        "reward_ceiling": max(scored) if scored else None,
        "reward_mean": _mean(scored),
        "clipped": _mean(played.clipped) or 0.0,
        "max_completion_length": spec.rollout.max_completion_length,
        "tool_calls_per_episode": per_episode,
        "tool_calls_accepted": accepted,
        "reward_model_best_right": best,
        "random_pick_right": pick,
    }
    stats["episode_tokens"], stats["episode_measured"] = episode_tokens(spec) if environment else (None, False)
    verdict = judge(stats, environment, spec.rollout.temperature, group)
    del stats["episode_tokens"], stats["episode_measured"]
    step = max(1, len(totals) // SAMPLES)
    samples = [
        ForecastSample(
            prompt=_last_message(played.prompts[i])[:SAMPLE_CHARS],
            completion=_text(played.completions[i])[:SAMPLE_CHARS],
            reward=totals[i],
        )
        for i in range(0, len(totals), step)
    ][:SAMPLES]
    forecast = Forecast(**stats, **verdict, samples=samples, seconds=round(seconds, 2))
    log.info("%s", forecast.sentence())
    return forecast


class ForecastCancelled(Exception):
    """A cancel request reached the forecast between two of its batches."""


def runs_forecast(job, spec: JobSpec) -> bool:
    """Whether the job forecasts before training: an online job with ``forecast.prompts`` (or a forecast-only job),
    not a resumed attempt (its first attempt forecast, and kept the forecast)."""
    from backend.core.spec import online_methods

    wanted = spec.forecast.only or spec.forecast.prompts > 0
    return spec.method in online_methods() and wanted and spec.evaluate is None and not job.resume


def forecast_first(job, spec: JobSpec, trainer, store, stop_event) -> bool:
    """The job's first phase: forecast, record it (the ``forecast`` artifact) and say whether the job ended here.

    A forecast-only job ends here (succeeded, its forecast its result); a ``no_signal`` forecast ends the job before
    training (succeeded, learned nothing: the forecast is its verdict) unless ``forecast.train_anyway``. True when
    the job ended (recorded); a cancel during the forecast ends it as cancelled at step 0."""
    import time as clock

    from backend.core.forecasts import DEFAULT_PROMPTS, NO_SIGNAL
    from backend.core.learning import no_signal_verdict
    from backend.jobs.records import JobStatus
    from backend.methods.table import support

    if not runs_forecast(job, spec):
        return False

    def progress(done: int, total: int) -> None:
        if stop_event.is_set() or store.cancel_requested(job.id):
            raise ForecastCancelled("stopped by request during the forecast")
        row = {"step": 0, "total_steps": spec.training.max_steps, "phase": "forecasting", "updated_at": clock.time()}
        store.report(job.id, [], {**row, "forecast_prompts": done, "forecast_of": total})

    prompts = spec.forecast.prompts or DEFAULT_PROMPTS
    try:
        progress(0, prompts)
        forecast = run_forecast(trainer, spec, prompts, progress)
    except ForecastCancelled as stopped:
        store.finish(job.id, JobStatus.cancelled, None, {"cancelled_at_step": 0, "cancel_note": str(stopped)})
        return True
    silent = forecast.forecast == NO_SIGNAL
    stops = spec.forecast.only or (silent and not spec.forecast.train_anyway)
    forecast = forecast.model_copy(
        update={"stopped": stops and not spec.forecast.only, "overridden": silent and spec.forecast.train_anyway}
    )
    if not stops:
        store.merge_artifacts(job.id, forecast=forecast)
        return False
    ended: dict[str, Any] = {"forecast": forecast}
    if not spec.forecast.only:
        metric = support(spec.method).learning_metrics(spec)[0]
        reason = f"stopped before training, as the forecast found no signal: {forecast.advice()}"
        ended["learning"] = no_signal_verdict(metric, reason)
        log.info("%s", reason)
    store.finish(job.id, JobStatus.succeeded, None, ended)
    return True
