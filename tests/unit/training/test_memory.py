"""Memory estimate: parameter counts against real models, monotonic behaviour, and the not-enough-memory warning."""

from __future__ import annotations

import pytest

from backend.core.spec import JobSpec
from backend.platform.hardware import DeviceInfo
from backend.training.memory import (
    GB,
    check_memory,
    count_lora_parameters,
    count_parameters,
    estimate_memory,
    format_bytes,
    load_model_config,
    parameter_breakdown,
    read_available_ram,
)
from tests.helpers import tiny_spec

A10G = DeviceInfo(kind="cuda", name="NVIDIA A10G", count=1, total_memory_gb=22.0, free_memory_gb=21.5, bf16=True)
CPU = DeviceInfo(kind="cpu", name="CPU", count=0, total_memory_gb=None, free_memory_gb=None, bf16=False)


def qwen25_05b_config():
    from transformers import Qwen2Config

    return Qwen2Config(
        hidden_size=896,
        num_hidden_layers=24,
        intermediate_size=4864,
        vocab_size=151936,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )


def small_configs():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    return {
        "qwen3": Qwen3Config(
            vocab_size=300,
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            tie_word_embeddings=False,
        ),
        "qwen3-tied": Qwen3Config(
            vocab_size=300,
            hidden_size=48,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=6,
            num_key_value_heads=3,
            head_dim=8,
            tie_word_embeddings=True,
        ),
        "llama": LlamaConfig(
            vocab_size=500,
            hidden_size=96,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=6,
            num_key_value_heads=2,
            tie_word_embeddings=False,
        ),
        "llama-biases": LlamaConfig(
            vocab_size=500,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
        ),
        "qwen2": Qwen2Config(
            vocab_size=400,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=False,
        ),
        "mistral": MistralConfig(
            vocab_size=400,
            hidden_size=64,
            intermediate_size=224,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=16,
            tie_word_embeddings=False,
        ),
        "qwen2.5-0.5b": qwen25_05b_config(),
    }


def real_parameter_count(config) -> int:
    """Build the model on the meta device (no memory, no weights) and count what torch sees; tied weights once."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def spec(**overrides) -> JobSpec:
    return JobSpec.from_dict(tiny_spec(**overrides))


@pytest.mark.parametrize("name", list(small_configs()))
def test_parameter_count_matches_the_real_model(name):
    config = small_configs()[name]
    assert count_parameters(config) == real_parameter_count(config)


def test_qwen25_05b_is_about_494m_parameters():
    count = count_parameters(qwen25_05b_config())
    assert count == pytest.approx(494_000_000, rel=0.02)
    parts = parameter_breakdown(qwen25_05b_config())
    assert parts.lm_head == 0  # tied
    assert parts.embeddings == 151936 * 896


def test_demo_model_count_is_exact(models_dir):
    from transformers import AutoModelForCausalLM

    config = load_model_config(spec(), models_dir)
    model = AutoModelForCausalLM.from_pretrained(models_dir / "tiny-qwen3")
    assert count_parameters(config) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"], ["self_attn.o_proj", "down_proj"]])
def test_lora_count_matches_peft(models_dir, targets):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from backend.models.loading import to_peft_config

    job = spec(lora={"r": 8, "target_modules": targets})
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(models_dir / "tiny-qwen3"), to_peft_config(job.lora))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count_lora_parameters(model.config, job.lora) == trainable


def test_no_lora_parameters_when_lora_is_off():
    assert count_lora_parameters(qwen25_05b_config(), spec(lora={"enabled": False}).lora) == 0


def weights(job: JobSpec, device: DeviceInfo = A10G) -> int:
    return estimate_memory(job, qwen25_05b_config(), device).breakdown[0][1]


def total(job: JobSpec, device: DeviceInfo = A10G, **kwargs) -> int:
    return estimate_memory(job, qwen25_05b_config(), device, **kwargs).total_bytes


def test_weights_shrink_with_quantization():
    none, int8, nf4 = (weights(spec(quantization={"mode": m})) for m in ("none", "8bit", "4bit"))
    assert nf4 < int8 < none
    assert none == count_parameters(qwen25_05b_config()) * 2  # bf16 on a bf16 GPU
    assert weights(spec(), CPU) == 2 * none  # fp32 on a CPU


def test_bigger_jobs_need_more():
    base = total(spec())
    assert total(spec(training={"batch_size": 8})) > base
    assert total(spec(training={"max_length": 4096})) > base
    assert total(spec(training={"gradient_checkpointing": False})) > base
    assert total(spec(lora={"r": 256})) > base


def test_lora_needs_less_than_full_fine_tuning():
    lora = estimate_memory(spec(), qwen25_05b_config(), A10G)
    full = estimate_memory(spec(lora={"enabled": False}), qwen25_05b_config(), A10G)
    assert lora.total_bytes < full.total_bytes
    labels = [label for label, _ in full.breakdown]
    assert any(label.startswith("gradients") for label in labels)
    assert any(label.startswith("AdamW") for label in labels)
    assert any(label.startswith("LoRA") for label, _ in lora.breakdown)


def test_dpo_full_fine_tuning_counts_a_reference_copy():
    lora = estimate_memory(spec(method="dpo"), qwen25_05b_config(), A10G)
    full = estimate_memory(spec(method="dpo", lora={"enabled": False}), qwen25_05b_config(), A10G)
    assert not any("reference" in label for label, _ in lora.breakdown)
    assert any("reference" in label for label, _ in full.breakdown)
    assert total(spec(method="dpo")) > total(spec())  # chosen and rejected: twice the sequences


def test_grpo_counts_the_generation_group():
    def grpo(n: int, completion: int = 256) -> JobSpec:
        return spec(
            method="grpo",
            dataset={"name": "math-demo"},
            training={"batch_size": n},
            grpo={"num_generations": n, "max_completion_length": completion},
        )

    estimate = estimate_memory(grpo(4), qwen25_05b_config(), A10G, prompt_tokens=128)
    labels = [label for label, _ in estimate.breakdown]
    assert "generation KV cache (4 completions)" in labels
    assert any(label.startswith("generation logits") for label in labels)
    assert total(grpo(8), prompt_tokens=128) > total(grpo(4), prompt_tokens=128)
    assert total(grpo(4, completion=2048), prompt_tokens=128) > total(grpo(4), prompt_tokens=128)
    assert total(grpo(4), prompt_tokens=1024) > total(grpo(4), prompt_tokens=128)


def test_breakdown_adds_up_and_reads_well():
    estimate = estimate_memory(spec(quantization={"mode": "4bit"}), qwen25_05b_config(), A10G)
    assert estimate.total_bytes == sum(size for _, size in estimate.breakdown)
    assert estimate.parameters == count_parameters(qwen25_05b_config())
    text = estimate.describe()
    assert "weights (4-bit NF4" in text
    assert text.splitlines()[-1] == f"total: {format_bytes(estimate.total_bytes)}"


def test_warning_when_the_gpu_has_too_little_free_memory():
    job = spec(lora={"enabled": False}, training={"batch_size": 16, "max_length": 4096})
    estimate = estimate_memory(job, qwen25_05b_config(), A10G)
    small = DeviceInfo(kind="cuda", name="NVIDIA A10G", count=1, total_memory_gb=22.0, free_memory_gb=2.0, bf16=True)
    warning = check_memory(estimate, small)
    assert warning is not None
    assert warning.startswith(f"Estimated {format_bytes(estimate.total_bytes)} needed but 2.0 GB free on NVIDIA A10G: ")
    assert "enable 4-bit loading" in warning and "enable LoRA" in warning
    assert warning.endswith("lower batch size or max length, or pick a smaller model.")

    huge = DeviceInfo(kind="cuda", name="NVIDIA H200", count=1, total_memory_gb=140.0, free_memory_gb=139.0, bf16=True)
    assert check_memory(estimate, huge) is None


def test_warning_leaves_out_what_is_already_on():
    estimate = estimate_memory(spec(quantization={"mode": "4bit"}), qwen25_05b_config(), A10G)
    warning = check_memory(estimate, A10G.__class__(**{**A10G.__dict__, "free_memory_gb": 0.1}))
    assert "4-bit" not in warning and "LoRA" not in warning and "checkpointing" not in warning


def test_cpu_uses_available_ram():
    estimate = estimate_memory(spec(), qwen25_05b_config(), CPU)
    warning = check_memory(estimate, CPU, available_ram_bytes=1 * GB)
    assert warning is not None and "1.0 GB free on this machine (system RAM)" in warning
    assert check_memory(estimate, CPU, available_ram_bytes=512 * GB) is None


def test_on_a_cpu_4bit_is_never_advised(paths):
    """bitsandbytes' 4-bit loading does not help on a CPU: neither the estimate, the warning nor Check advise it."""
    job = spec(lora={"enabled": False}, training={"batch_size": 16, "max_length": 4096})
    estimate = estimate_memory(job, qwen25_05b_config(), CPU)
    assert estimate.advice and not any("4-bit" in a for a in estimate.advice)
    warning = check_memory(estimate, CPU, available_ram_bytes=1 * GB)
    assert "4-bit" not in warning and "enable LoRA" in warning
    assert any("4-bit" in a for a in estimate_memory(job, qwen25_05b_config(), A10G).advice)  # a GPU still hears it

    from backend.api import StudioAPI
    from backend.platform.hardware import detect_device

    if detect_device().kind == "cpu":  # this machine's own Check result
        _, text = StudioAPI(paths.root, scheduler="none").jobs.check(tiny_spec())
        assert "To need less:" in text and "4-bit" not in text


def test_unknown_free_memory_gives_no_warning():
    estimate = estimate_memory(spec(), qwen25_05b_config(), A10G)
    unknown = DeviceInfo(kind="cuda", name="GPU", count=1, total_memory_gb=None, free_memory_gb=None, bf16=True)
    assert check_memory(estimate, unknown) is None


def test_read_available_ram(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n")
    assert read_available_ram(meminfo) == 8_000_000 * 1024
    assert (read_available_ram() or 0) > 0  # this machine: /proc/meminfo or psutil


def test_demo_job_fits_easily(models_dir):
    job = spec()
    estimate = estimate_memory(job, load_model_config(job, models_dir), CPU)
    assert estimate.total_bytes < 1.5 * GB  # mostly the runtime: torch, transformers and TRL themselves
    assert check_memory(estimate, CPU, available_ram_bytes=4 * GB) is None
