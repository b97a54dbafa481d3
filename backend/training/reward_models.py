"""Reward models in an online job's rewards (``rollout.rewards``' ``{model: JOB_ID or Hub id, weight}``): where each
loads from (a :class:`RewardModelSource`; a reward job's is read and held to its rule by ``training.named_jobs``), and
pre-flight's word when one scores a group's completions alike (run in the child of ``training.reward_checks``)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from backend.core.spec import JobSpec, ModelSpec, SpecError, quote_input, shorten
from backend.core.wording import counted
from backend.data.loading import load_training_dataset
from backend.methods.table import reward_columns


@dataclass(frozen=True)
class RewardModelSource:
    """Where a ``rollout.rewards`` entry's reward model comes from: a model to load with one score (a Hub id, a
    folder), and for a reward job its base model with the job's score-head adapter on top."""

    model: ModelSpec
    adapter: Path | None = None
    max_length: int | None = None  # a reward job's training.max_length: the longest conversation it read


# A reward model whose scores spread less than this within a group gives GRPO and RLOO next to no advantage to learn
# from (each completion's advantage is its score against its group's).
FLAT_GROUP_STD = 1e-2
FLAT_CHECK_PROMPTS = 4  # prompts sampled, one group each, by the starting model
FLAT_CHECK_TOKENS = 64  # most tokens per sampled completion (the rollout's own length when shorter)


def reward_model_warnings(
    spec: JobSpec,
    sources: dict,
    models_dir: Path,
    uploads_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> list[str]:
    """A warning per reward model (``sources``: ``named_jobs.reward_model_sources``) whose scores barely vary within
    a group: the base model samples a group of completions for each of a few prompts, as the rollout samples them,
    and the reward model scores them; a within-group standard deviation under ``FLAT_GROUP_STD`` means the job would
    learn next to nothing from it. A reward model that cannot be loaded at all is a SpecError naming its entry.

    It loads the models a user named: the app runs it in a child with limits (``reward_checks``), never itself."""
    if not sources:
        return []

    from backend.models.inference import load_for_inference
    from backend.models.mixed_batch import GenerationSettings
    from backend.models.scoring import as_messages, generate_completions

    rollout = spec.rollout
    rows, _ = load_training_dataset(
        spec.dataset, spec.method, reward_columns(spec), uploads_dir=uploads_dir, cache=cache_dir
    )
    prompts = [rows[i]["prompt"] for i in range(min(FLAT_CHECK_PROMPTS, len(rows)))]
    group = [prompt for prompt in prompts for _ in range(rollout.num_generations)]
    model, tokenizer = load_for_inference(spec.model, spec.quantization, models_dir)
    settings = GenerationSettings(
        max_new_tokens=min(rollout.max_completion_length, FLAT_CHECK_TOKENS),
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        seed=spec.training.seed,
    )
    texts = generate_completions(model, tokenizer, group, [None], settings)[None]
    del model
    completions = [
        [{"role": "assistant", "content": text}] if as_messages(prompt) is not None else text
        for prompt, text in zip(group, texts)
    ]
    scorers = loaded_scorers(rollout.rewards, sources, models_dir)
    warnings = []
    for index, reward in enumerate(rollout.rewards):
        if reward.model not in scorers:
            continue
        scores = scorers[reward.model](prompts=group, completions=completions)
        size = rollout.num_generations
        spread = statistics.mean(
            statistics.pstdev(scores[start : start + size]) for start in range(0, len(scores), size)
        )
        if spread < FLAT_GROUP_STD:
            warnings.append(
                f"rollout.rewards[{index}].model: the reward model scores the completions of a group almost alike "
                f"(within-group standard deviation {spread:.2g} over {counted(len(prompts), 'prompt')}, "
                f"{size} completions each, sampled by the base model), so {spec.method.value.upper()} gets next to "
                "no signal from it; check that it rates these answers differently, or raise rollout.temperature"
            )
    return warnings


def loaded_scorers(rewards, sources: dict, models_dir: Path) -> dict:
    """``model_reward.load_model_rewards`` of ``sources``, one model at a time: one that cannot be loaded (no such
    files, not a model transformers can put a score head on) is a SpecError sentence naming the first entry that
    names it; running out of memory is not the model's fault, and is raised as it is."""
    from backend.methods.rewards.model_reward import load_model_rewards
    from backend.platform.resource_errors import looks_like_oom

    scorers: dict = {}
    problems = []
    for index, reward in enumerate(rewards):
        name = reward.model
        if name is None or name not in sources or name in scorers:
            continue
        try:
            scorers.update(load_model_rewards({name: sources[name]}, models_dir))
        except Exception as exc:  # noqa: BLE001 - transformers says "cannot load" in many ways
            if isinstance(exc, MemoryError) or looks_like_oom(str(exc)):
                raise
            problems.append(
                f"rollout.rewards[{index}].model: {quote_input(name)} could not be loaded as a reward model "
                f"({without_paths(exc)}); give the Hub id of a model with a sequence-classification head "
                "transformers supports, or one of your finished reward jobs"
            )
            scorers[name] = None
    if problems:
        raise SpecError(problems)
    return scorers


def without_paths(exc: BaseException, limit: int = 200) -> str:
    """An error in a few words for a user: its type and first line, each file path cut to its last part (the
    server's folders are not theirs to see).

    >>> without_paths(OSError("/srv/cache/hub/models--a--b/snapshots/0f1e does not appear to have a file"))
    'OSError: 0f1e does not appear to have a file'
    """
    import re

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = re.sub(r"(?:/[^/\s'\"]+){2,}/?", lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1], text)
    return shorten(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, limit)
