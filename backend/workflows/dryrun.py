"""Dry run: one episode of a model (the base, or a finished job's adapter) in the job's environment, before queueing.

It plays with the chat template, tools, sampling settings and token budget the trainer will use, so what the user
reads is what GRPO will see: the prompt with the environment's first observation, each tool call and its result,
and the reward the environment gives.
"""

from __future__ import annotations

from pathlib import Path

from backend.core.spec import JobSpec, SpecError
from backend.data.loading import load_training_dataset
from backend.environments.episodes import Episode, EpisodeSettings, play_episode
from backend.environments.runtime import INTERACTIVE_BUDGET_S, open_environment
from backend.models.inference import load_for_inference


def dry_run(
    spec: JobSpec,
    models_dir: Path,
    adapter_dir: Path | None = None,
    row: int = 0,
    seed: int | None = None,
    uploads_dir: Path | None = None,
) -> Episode:
    """Play one episode on dataset row ``row`` (the job's own data, every column passed to the environment).

    ``uploads_dir`` is the job owner's uploads folder (for ``dataset.source: upload``)."""
    if not spec.environment.name:
        raise SpecError(["environment.name: a dry run needs an environment"])
    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True, uploads_dir=uploads_dir)
    if not 0 <= row < len(dataset):
        raise SpecError([f"dry run: row {row} is outside the dataset's {len(dataset)} rows"])
    # The environment first: one that cannot be reached (a mistyped URL, a sleeping Space) is refused in a second,
    # not after the model has loaded (10 s on a CPU, minutes for a large model).
    with open_environment(spec, sessions=1, budget_s=INTERACTIVE_BUDGET_S) as environment:
        model, tokenizer = load_for_inference(spec.model, spec.quantization, models_dir, adapter_dir)
        episode_env = environment.factory()
        try:
            return play_episode(
                model,
                tokenizer,
                episode_env,
                dataset[row],
                EpisodeSettings.from_spec(spec),
                spec.training.seed if seed is None else seed,
            )
        finally:
            episode_env._close()
