"""The before/after evaluation scores base and tuned in one mixed-adapter batch, with the results of separate runs."""

import threading

import pytest
import torch

from backend.core.spec import parse_spec
from backend.models.mixed_batch import BASE_ADAPTER, GenerationSettings, mixed_logprobs
from backend.models.scoring import generate_completions
from backend.models.scoring import render_texts as _render
from backend.training.callbacks import StoreReportingCallback
from backend.training.evaluation import evaluate_before_after
from backend.worker import build_trainer
from tests.helpers import job_data, tiny_spec

DPO = {
    "method": "dpo",
    "dataset": {"source": "builtin", "name": "preferences-demo"},
    "eval": {"holdout_rows": 6},
    "training": {"max_steps": 1, "batch_size": 4, "max_length": 128},
}
GRPO = {
    "method": "grpo",
    "dataset": {"source": "builtin", "name": "math-demo"},
    "eval": {"holdout_rows": 6},
    "grpo": {
        "num_generations": 4,
        "max_completion_length": 12,
        "temperature": 0.9,
        "top_p": 0.9,
        "rewards": [{"name": "accuracy"}, {"name": "length", "target_length": 4, "tolerance": 2}],
    },
    "training": {"max_steps": 1, "batch_size": 4, "max_length": 128},
}


def _tuned_trainer(paths, store, spec_dict):
    """The job's real trainer, its LoRA B matrices set to random values so the adapter changes the model's output."""
    spec = parse_spec(tiny_spec(**spec_dict))
    job = store.add(spec)
    trainer, held_out = build_trainer(
        spec, paths, job.id, [StoreReportingCallback(store, job.id, threading.Event())], None, job_data(spec, paths)
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    trainer.model.eval()
    return spec, trainer, [held_out[i] for i in range(len(held_out))]


def _reference_logprob(model, tokenizer, prompt, completion) -> float:
    """The evaluation's former scoring: one unpadded sequence per forward pass."""
    prompt_text, full_text = _render(tokenizer, prompt, completion)
    n_prompt = len(tokenizer(prompt_text, add_special_tokens=False).input_ids)
    ids = tokenizer(full_text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    token_lp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)
    return float(token_lp[n_prompt - 1 :].sum())


def _lm_head_batch_sizes(model) -> tuple[list[int], object]:
    sizes: list[int] = []
    hook = model.get_base_model().lm_head.register_forward_hook(lambda m, a, out: sizes.append(out.shape[0]))
    return sizes, hook


@pytest.mark.slow
def test_dpo_scores_of_one_mixed_batch_equal_separate_base_and_tuned_runs(paths, store):
    spec, trainer, rows = _tuned_trainer(paths, store, DPO)
    model, tokenizer = trainer.model, trainer.processing_class

    def margins() -> list[float]:
        return [
            _reference_logprob(model, tokenizer, r["prompt"], r["chosen"])
            - _reference_logprob(model, tokenizer, r["prompt"], r["rejected"])
            for r in rows
        ]

    tuned = margins()
    with model.disable_adapter():
        base = margins()
    assert max(abs(t - b) for t, b in zip(tuned, base)) > 0.1, "the adapter changes the scores"

    # Every log-prob of the mixed batch (rows of both sides, padded together) matches its separate run.
    texts = [_render(tokenizer, r["prompt"], r[key]) for r in rows for key in ("chosen", "rejected")]
    mixed = mixed_logprobs(model, tokenizer, texts + texts, ["default"] * len(texts) + [BASE_ADAPTER] * len(texts))
    assert len(mixed) == 2 * len(texts)
    for i, margin in enumerate(tuned):
        assert mixed[2 * i] - mixed[2 * i + 1] == pytest.approx(margin, abs=1e-4)
    for i, margin in enumerate(base):
        j = len(texts) + 2 * i
        assert mixed[j] - mixed[j + 1] == pytest.approx(margin, abs=1e-4)

    sizes, hook = _lm_head_batch_sizes(model)
    try:
        result = evaluate_before_after(trainer, spec, rows)
    finally:
        hook.remove()
    assert sizes[:2] == [16, 8], "6 rows x 2 sides x (chosen, rejected) in two forward passes of up to 16 sequences"
    # Then the greedy answers to the prompts (exact match against the chosen answer): both sides in one batch a step.
    assert set(sizes[2:]) == {12}
    for side, reference in (("tuned", tuned), ("base", base)):
        assert result[side]["logprob_margin"] == pytest.approx(sum(reference) / len(reference), abs=1e-4)
        assert result[side]["preference_accuracy"] == sum(m > 0 for m in reference) / len(reference)


@pytest.mark.slow
def test_grpo_completions_of_one_mixed_batch_equal_separate_base_and_tuned_runs(paths, store):
    spec, trainer, rows = _tuned_trainer(paths, store, GRPO)
    model, tokenizer = trainer.model, trainer.processing_class
    prompts = [r["prompt"] for r in rows]

    def greedy_alone(prompt) -> str:
        enc = tokenizer(_render(tokenizer, prompt)[0], add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=12, pad_token_id=tokenizer.pad_token_id)
        return tokenizer.decode(out[0, enc.input_ids.shape[1] :], skip_special_tokens=True)

    tuned = [greedy_alone(p) for p in prompts]
    with model.disable_adapter():
        base = [greedy_alone(p) for p in prompts]
    assert tuned != base, "the adapter changes the answers"

    sizes, hook = _lm_head_batch_sizes(model)
    try:
        greedy = generate_completions(
            model, tokenizer, prompts, ["default", BASE_ADAPTER], GenerationSettings(max_new_tokens=12, temperature=0)
        )
    finally:
        hook.remove()
    assert greedy == {"default": tuned, BASE_ADAPTER: base}
    assert set(sizes) == {12}, "each step ran the 6 prompts of both sides as one batch"

    # Seeded sampling: prompt i draws from its own stream (seed + i), so batching leaves every completion as it was
    # when the prompt ran alone on one side.
    sampling = GenerationSettings(max_new_tokens=12, temperature=0.9, top_p=0.9, seed=7)
    batched = generate_completions(model, tokenizer, prompts, ["default", BASE_ADAPTER], sampling)
    for side in ("default", BASE_ADAPTER):
        alone = [
            generate_completions(
                model,
                tokenizer,
                [p],
                [side],
                GenerationSettings(max_new_tokens=12, temperature=0.9, top_p=0.9, seed=7 + i),
            )[side][0]
            for i, p in enumerate(prompts)
        ]
        assert batched[side] == alone
    assert batched["default"] != tuned, "sampling is not greedy decoding"

    result = evaluate_before_after(trainer, spec, rows)
    # "accuracy": the verdict's guard (the reward mixes in length), per row.
    assert (
        set(result["tuned"]) == set(result["base"]) == {"reward/accuracy", "reward/length", "reward/total", "accuracy"}
    )
    assert result["tuned"]["accuracy"] == result["tuned"]["reward/accuracy"]
    assert result["rows"] == 6
