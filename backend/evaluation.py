"""Before/after evaluation on held-out rows: did training help? Base = the policy with its adapter switched off."""

from __future__ import annotations

import math
from typing import Any

from backend.spec import JobSpec, Method


def _messages(value) -> list[dict] | None:
    return value if isinstance(value, list) else None


def _render(tokenizer, prompt, completion=None) -> tuple[str, str]:
    """(prompt text with the generation prompt, full text) the way the trainers render a row."""
    if _messages(prompt) is not None:
        prompt_text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        if completion is None:
            return prompt_text, prompt_text
        full = tokenizer.apply_chat_template(prompt + completion, tokenize=False)
        return prompt_text, full
    return prompt, prompt + (completion or "")


def completion_logprob(model, tokenizer, prompt, completion) -> float:
    """Sum of the model's log-probabilities of the completion's tokens given the prompt."""
    import torch

    prompt_text, full_text = _render(tokenizer, prompt, completion)
    n_prompt = len(tokenizer(prompt_text, add_special_tokens=False).input_ids)
    ids = tokenizer(full_text, add_special_tokens=False, return_tensors="pt").input_ids.to(model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    targets = ids[0, 1:]
    token_lp = logprobs.gather(1, targets.unsqueeze(1)).squeeze(1)
    return float(token_lp[n_prompt - 1 :].sum())


def _preference_scores(model, tokenizer, rows) -> dict[str, float]:
    margins = []
    for row in rows:
        prompt = row.get("prompt", [] if _messages(row["chosen"]) is not None else "")
        margins.append(
            completion_logprob(model, tokenizer, prompt, row["chosen"])
            - completion_logprob(model, tokenizer, prompt, row["rejected"])
        )
    return {
        "preference_accuracy": sum(m > 0 for m in margins) / len(margins),
        "logprob_margin": sum(margins) / len(margins),
    }


def _generate(model, tokenizer, prompt, spec: JobSpec, seed: int) -> str:
    import torch

    prompt_text, _ = _render(tokenizer, prompt)
    enc = tokenizer(prompt_text, add_special_tokens=False, return_tensors="pt").to(model.device)
    torch.manual_seed(seed)
    out = model.generate(
        **enc, max_new_tokens=spec.grpo.max_completion_length, do_sample=True,
        temperature=spec.grpo.temperature, top_p=spec.grpo.top_p, pad_token_id=tokenizer.pad_token_id,
    )
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def _reward_scores(model, tokenizer, rows, spec: JobSpec) -> dict[str, float]:
    from backend.rewards import build_rewards

    funcs, weights = build_rewards(spec.grpo.rewards)
    seed = spec.training.seed
    completions, prompts = [], []
    for i, row in enumerate(rows):
        text = _generate(model, tokenizer, row["prompt"], spec, seed + i)
        conversational = _messages(row["prompt"]) is not None
        completions.append([{"role": "assistant", "content": text}] if conversational else text)
        prompts.append(row["prompt"])
    columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
    scores, total = {}, [0.0] * len(rows)
    for func, weight in zip(funcs, weights):
        values = func(completions=completions, prompts=prompts, **columns)
        values = [0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
        scores[f"reward/{func.__name__}"] = sum(values) / len(values)
        total = [t + weight * v for t, v in zip(total, values)]
    scores["reward/total"] = sum(total) / len(total)
    return scores


def evaluate_before_after(trainer, spec: JobSpec, held_out) -> dict[str, Any]:
    """Scores of the base and the tuned model on the same held-out rows, per the job's method."""
    model, tokenizer = trainer.model, trainer.processing_class
    model.eval()
    rows = [held_out[i] for i in range(len(held_out))]

    def score() -> dict[str, float]:
        if spec.method is Method.sft:
            return {"eval_loss": trainer.evaluate()["eval_loss"]}
        if spec.method is Method.dpo:
            return _preference_scores(model, tokenizer, rows)
        return _reward_scores(model, tokenizer, rows, spec)

    result: dict[str, Any] = {"rows": len(rows), "tuned": score()}
    if spec.eval.compare_base and hasattr(model, "disable_adapter"):
        with model.disable_adapter():  # the same weights in memory, LoRA switched off: the base model
            result["base"] = score()
    return result
