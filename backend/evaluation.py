"""Before/after evaluation on held-out rows: did training help? Base = the policy with its adapter switched off."""

from __future__ import annotations

import math
from typing import Any

from backend.mixed_batch import BASE_ADAPTER, GenerationSettings, adapter_name, mixed_generate, mixed_logprobs
from backend.spec import JobSpec
from backend.training.methods import support


def _messages(value) -> list[dict] | None:
    return value if isinstance(value, list) else None


def render_texts(tokenizer, prompt, completion=None) -> tuple[str, str]:
    """(prompt text with the generation prompt, full text) the way the trainers render a row."""
    if _messages(prompt) is not None:
        prompt_text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        if completion is None:
            return prompt_text, prompt_text
        full = tokenizer.apply_chat_template(prompt + completion, tokenize=False)
        return prompt_text, full
    return prompt, prompt + (completion or "")


# Sequences per forward pass: a held-out set of any size is scored in chunks of this many rows (both sides counted).
BATCH_ROWS = 16


def _sides(model, compare_base: bool) -> list[str | None]:
    """The adapter of each side to score, tuned first; None alone for a model without an adapter (tuned only)."""
    tuned = adapter_name(model)
    if tuned is None:
        return [None]
    return [tuned, BASE_ADAPTER] if compare_base else [tuned]


def chunks(items: list, size: int = BATCH_ROWS):
    """``items`` in slices of at most ``size``: the rows of one forward pass."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def per_side(sides: list[str | None], values: list[tuple[str | None, Any]]) -> dict[str | None, list]:
    """(side, value) pairs grouped by side, every side present."""
    by_side: dict[str | None, list] = {side: [] for side in sides}
    for side, value in values:
        by_side[side].append(value)
    return by_side


def preference_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, float]]:
    """Preference accuracy and mean log-prob margin (chosen minus rejected) per side, every side in the same batches."""
    model, tokenizer = trainer.model, trainer.processing_class
    # Per row and side: the chosen text, then the rejected one (2 x sides sequences per row).
    items = []
    for row in rows:
        prompt = row.get("prompt", [] if _messages(row["chosen"]) is not None else "")
        for side in sides:
            items += [
                (side, render_texts(tokenizer, prompt, row["chosen"])),
                (side, render_texts(tokenizer, prompt, row["rejected"])),
            ]
    logprobs = []
    for chunk in chunks(items):
        logprobs += mixed_logprobs(model, tokenizer, [text for _, text in chunk], [side for side, _ in chunk])
    margins = per_side(sides, [(items[i][0], logprobs[i] - logprobs[i + 1]) for i in range(0, len(items), 2)])
    return {
        side: {
            "preference_accuracy": sum(m > 0 for m in values) / len(values),
            "logprob_margin": sum(values) / len(values),
        }
        for side, values in margins.items()
    }


def generate_completions(model, tokenizer, prompts, sides, settings: GenerationSettings) -> dict[str | None, list[str]]:
    """Each prompt's completion under each side, all sides in the same batches.

    Prompt i is sampled with seed ``settings.seed + i`` on every side (its own random stream), so a completion does
    not depend on how the rows are batched, and base and tuned draw the same random numbers for the same prompt.
    """
    texts = [render_texts(tokenizer, prompt)[0] for prompt in prompts]
    items = [(i, side) for i in range(len(prompts)) for side in sides]
    completions = []
    for chunk in chunks(items):
        ids = mixed_generate(
            model, tokenizer, [texts[i] for i, _ in chunk], [side for _, side in chunk], settings,
            row_seeds=[settings.seed + i for i, _ in chunk],
        )
        completions += [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
    return per_side(sides, [(side, text) for (_, side), text in zip(items, completions)])


def reward_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, float]]:
    """Mean reward per reward function and in total per side, over completions each side samples for the prompts."""
    model, tokenizer = trainer.model, trainer.processing_class
    from backend.rewards import build_rewards

    funcs, weights = build_rewards(spec.grpo.rewards)
    settings = GenerationSettings(
        max_new_tokens=spec.grpo.max_completion_length, temperature=spec.grpo.temperature, top_p=spec.grpo.top_p,
        seed=spec.training.seed,
    )
    prompts = [row["prompt"] for row in rows]
    columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
    result = {}
    for side, texts in generate_completions(model, tokenizer, prompts, sides, settings).items():
        completions = [
            [{"role": "assistant", "content": text}] if _messages(prompt) is not None else text
            for prompt, text in zip(prompts, texts)
        ]
        scores, total = {}, [0.0] * len(rows)
        for func, weight in zip(funcs, weights):
            values = func(completions=completions, prompts=prompts, **columns)
            values = [0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
            scores[f"reward/{func.__name__}"] = sum(values) / len(values)
            total = [t + weight * v for t, v in zip(total, values)]
        scores["reward/total"] = sum(total) / len(total)
        result[side] = scores
    return result


def loss_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, float]]:
    """The trainer's own held-out loss per side: with the adapter on, and off (the same weights: the base model)."""
    scores = {}
    for side in sides:
        if side == BASE_ADAPTER:
            with trainer.model.disable_adapter():
                scores[side] = {"eval_loss": trainer.evaluate()["eval_loss"]}
        else:
            scores[side] = {"eval_loss": trainer.evaluate()["eval_loss"]}
    return scores


def evaluate_before_after(trainer, spec: JobSpec, held_out) -> dict[str, Any]:
    """Scores of the base and the tuned model on the same held-out rows, by the job's method's evaluation.

    Both come from the trainer's model, loaded once: the base is that model with its adapter off. Methods that
    score sequences score both sides in the same batches (PEFT's mixed-adapter rows); SFT's held-out loss is the
    trainer's own evaluation, run with the adapter on and then off.
    """
    model = trainer.model
    model.eval()
    rows = [held_out[i] for i in range(len(held_out))]
    result: dict[str, Any] = {"rows": len(rows)}
    sides = _sides(model, spec.eval.compare_base)
    scores = support(spec.method).evaluate(trainer, spec, rows, sides)
    result["tuned"] = scores[sides[0]]
    if BASE_ADAPTER in scores:
        result["base"] = scores[BASE_ADAPTER]
    return result
