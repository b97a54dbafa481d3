"""The drift estimator on the tiny demo model: a tuned adapter that changes nothing drifts 0, a perturbed one drifts,
from the base or from a parent's adapter, and the verdict says so in a caution that changes no verdict."""

from __future__ import annotations

import pytest
import torch

from backend.core.artifacts import DriftCheck
from backend.core.learning import LearningMetric, verdict, with_drift
from backend.core.spec import JobSpec, parse_spec
from backend.models.mixed_batch import BASE_ADAPTER
from backend.training.drift import drift_check, measure_drift
from tests.helpers import tiny_spec

PROMPTS = [([{"role": "user", "content": f"What is {a} + {a + 3}?"}], None) for a in range(6)]


@pytest.fixture(scope="module")
def tuned(models_dir):
    """The demo model under a fresh LoRA (B = 0: the tuned side is the base), and its tokenizer."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.models.demo import ensure_demo_model

    path = ensure_demo_model(models_dir)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    return model, AutoTokenizer.from_pretrained(path)


def _perturb(model, adapter: str, scale: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name and f".{adapter}." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)


def test_an_unchanged_adapter_drifts_zero_and_a_perturbed_one_drifts(tuned):
    model, tokenizer = tuned
    _perturb(model, "default", 0.0, 0)
    values, tokens = measure_drift(model, tokenizer, PROMPTS, max_new_tokens=12)
    assert len(values) == len(PROMPTS) and tokens >= len(PROMPTS)
    assert max(values) == pytest.approx(0.0, abs=1e-5)

    _perturb(model, "default", 0.05, 1)
    small, _ = measure_drift(model, tokenizer, PROMPTS, max_new_tokens=12)
    _perturb(model, "default", 0.5, 1)
    large, _ = measure_drift(model, tokenizer, PROMPTS, max_new_tokens=12)
    assert 0 < sum(small) < sum(large), (small, large)

    # From a parent's adapter that is the tuned one, nothing moved; from the base, all of it did.
    from peft import LoraConfig

    model.add_adapter("parent", LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    model.load_state_dict(
        {n.replace(".default.", ".parent."): p for n, p in model.state_dict().items() if ".default." in n},
        strict=False,
    )
    model.set_adapter("default")
    same, _ = measure_drift(model, tokenizer, PROMPTS, start="parent", max_new_tokens=12)
    assert max(same) == pytest.approx(0.0, abs=1e-5)
    from_base, _ = measure_drift(model, tokenizer, PROMPTS, start=BASE_ADAPTER, max_new_tokens=12)
    assert from_base == pytest.approx(large, rel=1e-4)


def test_a_small_vocabulary_decodes_its_prompts_in_one_batch_with_the_same_drift(tuned, monkeypatch):
    """The batch is sized by what its log-probabilities weigh: the demo model's 1,024-token vocabulary takes every
    prompt at once (one decode, not one per 8 prompts), and the figures do not depend on the batch."""
    from backend.training import drift

    model, tokenizer = tuned
    _perturb(model, "default", 0.5, 2)
    prompts = [([{"role": "user", "content": f"What is {a} + {2 * a + 1}?"}], None) for a in range(24)]
    batches = []
    real = drift.mixed_generate
    monkeypatch.setattr(
        drift, "mixed_generate", lambda m, t, texts, *a, **k: batches.append(len(texts)) or real(m, t, texts, *a, **k)
    )
    whole, _ = measure_drift(model, tokenizer, prompts, max_new_tokens=12)
    assert batches == [24]
    monkeypatch.setattr(drift, "DRIFT_LOGITS_BYTES", 8 * 2 * 13 * 1024 * 4)  # room for 8 prompts of 12 tokens
    in_eights, _ = measure_drift(model, tokenizer, prompts, max_new_tokens=12)
    assert batches == [24, 8, 8, 8]
    assert whole == pytest.approx(in_eights, rel=1e-4, abs=1e-6)


def test_the_check_on_held_out_rows_and_a_reward_model_that_writes_no_answers(tuned):
    model, tokenizer = tuned
    spec = parse_spec(tiny_spec(dataset={"source": "builtin", "name": "arith-sft"}))
    rows = [{"messages": [*prompt, {"role": "assistant", "content": "x"}]} for prompt, _ in PROMPTS]
    check = drift_check(spec, model, tokenizer, rows)
    assert check.rows == len(PROMPTS) and check.mean > 0 and check.ci95 is not None and check.reference == "base"
    reward = JobSpec.model_validate({**spec.model_dump(), "method": "reward"})
    skipped = drift_check(reward, model, tokenizer, rows)
    assert skipped.mean is None and "writes none" in (skipped.skipped or "")


def test_a_drift_beyond_healthy_is_a_caution_that_changes_no_verdict():
    accuracy = LearningMetric("exact_match", "held-out accuracy", rate=True)
    improved = verdict(accuracy, [0.0, 1.0] * 32, [1.0] * 64)
    far = with_drift(improved, DriftCheck(mean=3.0, ci95=0.2, rows=64, threshold=0.5, exceeds=True))
    assert far.verdict == "improved" and far.sentence.startswith(improved.sentence)
    assert "Caution: it drifted far from the base (KL 3 nats/token" in far.sentence
    near = with_drift(improved, DriftCheck(mean=0.1, ci95=0.02, rows=64, threshold=0.5))
    assert near.sentence == improved.sentence and near.drift.mean == 0.1
