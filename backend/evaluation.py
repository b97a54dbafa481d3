"""Before/after evaluation on held-out rows: did training help? Each side is the same loaded model with another
adapter: the tuned one, the parent job's adapter where a staged job started (``start``), and none (the base).

Every method's evaluation returns, per side, its summary scores and the per-row values (``per_row``) the learning
verdict (backend/learning.py) draws its interval from.
"""

from __future__ import annotations

import math
import re
from typing import Any

from backend.learning import LearningMetric, verdict
from backend.mixed_batch import BASE_ADAPTER, GenerationSettings, adapter_name, mixed_generate, mixed_logprobs
from backend.spec import JobSpec
from backend.training.methods import support

# The adapter name the parent's adapter is loaded under for the evaluation of a staged job.
START_ADAPTER = "studio_start"
PER_ROW = "per_row"
# Greedy answers are this many tokens longer than the reference at most (and never longer than ANSWER_TOKENS).
ANSWER_SLACK_TOKENS = 16
ANSWER_TOKENS = 256
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


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


# Sequences per forward pass: a held-out set of any size is scored in chunks of this many rows (every side counted).
BATCH_ROWS = 16


def _sides(model, compare_base: bool) -> list[str | None]:
    """The adapter of each side to score, tuned first, then the start (a parent's adapter) if loaded, then the base;
    None alone for a model without an adapter (tuned only)."""
    tuned = adapter_name(model)
    if tuned is None:
        return [None]
    sides = [tuned]
    if START_ADAPTER in getattr(model, "peft_config", {}):
        sides.append(START_ADAPTER)
    return sides + [BASE_ADAPTER] if compare_base else sides


def side_label(side: str | None) -> str:
    """``tuned``, ``start`` or ``base``: what a side is called in the stored evaluation."""
    return {BASE_ADAPTER: "base", START_ADAPTER: "start"}.get(side, "tuned")


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


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _answer_key(text: str) -> str:
    """What two answers are compared by: the last ``\\boxed{}`` if there is one, else the text, whitespace folded."""
    boxed = _BOXED.findall(text or "")
    return boxed[-1].strip() if boxed else " ".join((text or "").split())


def answer_scores(model, tokenizer, prompts: list, references: list[str], sides) -> dict[str | None, dict]:
    """Greedy answers of every side to ``prompts`` against the reference answers: exact match (the boxed answer, or
    the whole answer with whitespace folded) and, where the references box their answer, answer format (the answer
    has a ``\\boxed{}``). Per side: the shares and the per-row values."""
    longest = max(len(tokenizer(ref, add_special_tokens=False)["input_ids"]) for ref in references)
    settings = GenerationSettings(max_new_tokens=min(ANSWER_TOKENS, longest + ANSWER_SLACK_TOKENS), temperature=0)
    answers = generate_completions(model, tokenizer, prompts, sides, settings)
    boxed = all(_BOXED.search(ref) for ref in references)
    result = {}
    for side, texts in answers.items():
        exact = [float(_answer_key(t) == _answer_key(r)) for t, r in zip(texts, references)]
        scores: dict[str, Any] = {"exact_match": _mean(exact), PER_ROW: {"exact_match": exact}}
        if boxed:
            shaped = [float(bool(_BOXED.search(t))) for t in texts]
            scores["answer_format"] = _mean(shaped)
            scores[PER_ROW]["answer_format"] = shaped
        result[side] = scores
    return result


def _answered(prompt, completion) -> tuple[Any, str] | None:
    """(prompt, reference answer) of a row whose completion is one assistant answer in text, else None."""
    if isinstance(completion, str):
        return prompt, completion
    if (
        isinstance(completion, list)
        and len(completion) == 1
        and isinstance(completion[0], dict)
        and completion[0].get("role") == "assistant"
        and isinstance(completion[0].get("content"), str)
        and not completion[0].get("tool_calls")
    ):
        return prompt, completion[0]["content"]
    return None


def _merge(into: dict[str | None, dict], extra: dict[str | None, dict]) -> dict[str | None, dict]:
    for side, scores in extra.items():
        per_row = {**into[side].get(PER_ROW, {}), **scores.pop(PER_ROW, {})}
        into[side].update(scores)
        into[side][PER_ROW] = per_row
    return into


def preference_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """Preference accuracy and mean log-prob margin (chosen minus rejected) per side, every side in the same batches;
    and the greedy answers' exact match against the chosen answer (preference learning must not cost accuracy)."""
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
    scores = {
        side: {
            "preference_accuracy": sum(m > 0 for m in values) / len(values),
            "logprob_margin": sum(values) / len(values),
            PER_ROW: {"preference_accuracy": [float(m > 0) for m in values], "logprob_margin": values},
        }
        for side, values in margins.items()
    }
    answered = [_answered(row.get("prompt"), row["chosen"]) for row in rows]
    if rows and all(a is not None and a[0] is not None for a in answered):
        _merge(scores, answer_scores(model, tokenizer, [a[0] for a in answered], [a[1] for a in answered], sides))
    return scores


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
            model,
            tokenizer,
            [texts[i] for i, _ in chunk],
            [side for _, side in chunk],
            settings,
            row_seeds=[settings.seed + i for i, _ in chunk],
        )
        completions += [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
    return per_side(sides, [(side, text) for (_, side), text in zip(items, completions)])


def reward_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """Mean reward per reward function and in total per side, over each side's greedy completions of the prompts
    (greedy: the answer the model gives, not one draw of many, so the before/after is not sampling noise)."""
    model, tokenizer = trainer.model, trainer.processing_class
    from backend.rewards import build_rewards

    funcs, weights = build_rewards(spec.grpo.rewards)
    settings = GenerationSettings(
        max_new_tokens=spec.grpo.max_completion_length, temperature=0, seed=spec.training.seed
    )
    prompts = [row["prompt"] for row in rows]
    columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
    result = {}
    for side, texts in generate_completions(model, tokenizer, prompts, sides, settings).items():
        completions = [
            [{"role": "assistant", "content": text}] if _messages(prompt) is not None else text
            for prompt, text in zip(prompts, texts)
        ]
        scores: dict[str, Any] = {}
        total = [0.0] * len(rows)
        for func, weight in zip(funcs, weights):
            values = func(completions=completions, prompts=prompts, **columns)
            values = [0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
            scores[f"reward/{func.__name__}"] = sum(values) / len(values)
            total = [t + weight * v for t, v in zip(total, values)]
        scores["reward/total"] = sum(total) / len(total)
        scores[PER_ROW] = {"reward/total": total}
        result[side] = scores
    return result


def _split_answer(row) -> tuple[Any, Any] | None:
    """(prompt, completion) of an SFT row: a conversation is cut before its first assistant turn."""
    if "messages" in row and _messages(row["messages"]):
        messages = row["messages"]
        first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
        return (messages[:first], messages[first:]) if first else None
    if "prompt" in row and "completion" in row:
        return row["prompt"], row["completion"]
    return None


def token_nll(model, tokenizer, pairs: list[tuple[Any, Any]], sides) -> dict[str | None, list[float]]:
    """Per side, each (prompt, completion) row's mean negative log-likelihood per completion token (nats)."""
    texts = [render_texts(tokenizer, prompt, completion) for prompt, completion in pairs]
    counts = [
        max(
            1,
            len(tokenizer(full, add_special_tokens=False)["input_ids"])
            - len(tokenizer(head, add_special_tokens=False)["input_ids"]),
        )
        for head, full in texts
    ]
    items = [(i, side) for i in range(len(texts)) for side in sides]
    logprobs: list[float] = []
    for chunk in chunks(items):
        logprobs += mixed_logprobs(model, tokenizer, [texts[i] for i, _ in chunk], [side for _, side in chunk])
    return per_side(sides, [(side, -lp / counts[i]) for (i, side), lp in zip(items, logprobs)])


def loss_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """The trainer's own held-out loss with the adapter on and off, each row's loss per completion token on every
    side, and, where each row's answer is one assistant reply, the greedy answers' exact match and format."""
    scores: dict[str | None, dict[str, Any]] = {side: {} for side in sides}
    for side in sides:
        if side == BASE_ADAPTER:
            with trainer.model.disable_adapter():
                scores[side]["eval_loss"] = trainer.evaluate()["eval_loss"]
        elif side == sides[0]:
            scores[side]["eval_loss"] = trainer.evaluate()["eval_loss"]
    model, tokenizer = trainer.model, trainer.processing_class
    pairs = [_split_answer(row) for row in rows]
    if rows and all(pair is not None for pair in pairs):
        for side, values in token_nll(model, tokenizer, pairs, sides).items():
            scores[side]["token_nll"] = _mean(values)
            scores[side][PER_ROW] = {"token_nll": values}
        answered = [_answered(prompt, completion) for prompt, completion in pairs]
        if all(a is not None for a in answered):
            _merge(scores, answer_scores(model, tokenizer, [a[0] for a in answered], [a[1] for a in answered], sides))
    return scores


def load_start_adapter(model, parent_adapter) -> bool:
    """Load a staged job's starting adapter (its parent's) beside the tuned one, so the evaluation scores where the job
    started; False when there is nothing to load (no parent, or no PEFT model)."""
    if parent_adapter is None or not hasattr(model, "load_adapter"):
        return False
    if START_ADAPTER not in model.peft_config:
        model.load_adapter(str(parent_adapter), adapter_name=START_ADAPTER, is_trainable=False)
    return True


def evaluate_before_after(trainer, spec: JobSpec, held_out, parent_adapter=None) -> dict[str, Any]:
    """Scores of the base, the start (a staged job's parent adapter) and the tuned model on the same held-out rows,
    by the job's method's evaluation.

    All come from the trainer's model, loaded once: the base is that model with its adapter off, the start the
    parent's adapter loaded beside the tuned one. Methods that score sequences score every side in the same batches
    (PEFT's mixed-adapter rows). ``per_row`` holds each side's per-row values for the learning verdict.
    """
    model = trainer.model
    model.eval()
    load_start_adapter(model, parent_adapter)
    rows = [held_out[i] for i in range(len(held_out))]
    result: dict[str, Any] = {"rows": len(rows), PER_ROW: {}}
    sides = _sides(model, spec.eval.compare_base)
    scores = support(spec.method).evaluate(trainer, spec, rows, sides)
    for side in sides:
        label = side_label(side)
        side_scores = dict(scores[side])
        result[PER_ROW][label] = side_scores.pop(PER_ROW, {})
        result[label] = side_scores
    return result


def learning_verdict(
    spec: JobSpec, evaluation: dict[str, Any] | None, environment: dict[str, Any] | None, no_signal: str | None = None
):
    """The job's learning verdict from its evaluations (an environment's success rate first, else the method's first
    declared metric the evaluation has), or None when no evaluation has per-row scores of two sides."""
    candidates: list[tuple[LearningMetric, dict[str, Any]]] = []
    if environment and PER_ROW in environment:
        candidates.append((SUCCESS_RATE, environment))
    if evaluation and PER_ROW in evaluation:
        candidates += [(metric, evaluation) for metric in support(spec.method).learning_metrics(spec)]
    for metric, result in candidates:
        per_row = result[PER_ROW]
        start = "start" if "start" in per_row else "base"
        if metric.key not in per_row.get("tuned", {}) or metric.key not in per_row.get(start, {}):
            continue
        groups = per_row["tuned"].get("groups")
        return verdict(
            metric,
            per_row[start][metric.key],
            per_row["tuned"][metric.key],
            groups=[bool(g) for g in groups] if groups else None,
            base_rows=per_row.get("base", {}).get(metric.key),
            start="parent" if start == "start" else "base",
            no_signal=no_signal,
        )
    return None


SUCCESS_RATE = LearningMetric("success", "environment success rate", rate=True)
