"""JobSpec: defaults, validation messages a person can act on, JSON round trip, documented fields."""

import json
from pathlib import Path

import pytest

from backend.demo_model import DEMO_MODEL_ID
from backend.spec import JobSpec, Method, SpecError, field_help, parse_spec, spec_fields_markdown


def test_defaults_are_offline_demo_choices(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = JobSpec()
    assert spec.method is Method.sft
    assert spec.model.name_or_path == DEMO_MODEL_ID
    assert spec.dataset.source == "builtin" and spec.dataset.name == "chat-demo"
    assert spec.lora.enabled and spec.quantization.mode == "none"


def test_online_default_model_is_small_instruct(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert JobSpec().model.name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"


def test_json_round_trip_is_lossless():
    spec = parse_spec(
        {
            "model": {"name_or_path": "Qwen/Qwen3-0.6B", "revision": "main"},
            "dataset": {"source": "hub", "name": "trl-lib/Capybara", "max_rows": 100, "columns": {"messages": "conv"}},
            "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]},
            "quantization": {"mode": "4bit"},
            "training": {"max_steps": 10, "learning_rate": 1e-4, "seed": 7},
            "output": {"run_name": "x", "push_to_hub": True, "hub_repo_id": "me/x"},
            "owner": "alice",
        }
    )
    text = spec.to_json()
    assert JobSpec.from_json(text) == spec
    assert json.loads(text)["schema_version"] == 1


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"training": {"learning_rate": -1}}, "training.learning_rate: must be greater than 0 (got -1)"),
        ({"training": {"batch_size": 0}}, "training.batch_size: must be greater than 0 (got 0)"),
        ({"training": {"max_steps": 0}}, "training.max_steps: must be greater than 0 (got 0)"),
        ({"training": {"epochs": 0}}, "training.epochs: must be greater than 0 (got 0)"),
        ({"lora": {"r": -4}}, "lora.r: must be greater than 0 (got -4)"),
        ({"training": {"learnin_rate": 1e-4}}, "training.learnin_rate: unknown setting"),
        ({"method": "ppo"}, "method: Input should be 'sft', 'dpo' or 'grpo'"),
        ({"quantization": {"mode": "3bit"}}, "quantization.mode: Input should be 'none', '4bit' or '8bit'"),
        ({"schema_version": 99}, "schema_version: this app reads spec version 1; got 99"),
        ({"lora": {"target_modules": []}}, "lora.target_modules: name at least one module"),
        (
            {"lora": {"enabled": False}, "quantization": {"mode": "4bit"}},
            "a quantized base model cannot be trained directly: enable LoRA",
        ),
    ],
)
def test_invalid_values_give_actionable_messages(data, expected):
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert any(expected in p for p in err.value.problems), err.value.problems


def test_every_problem_is_reported_at_once():
    with pytest.raises(SpecError) as err:
        parse_spec({"training": {"learning_rate": 0, "batch_size": -1, "gradient_accumulation_steps": 0}})
    assert len(err.value.problems) == 3


def test_invalid_json_text_is_a_spec_error():
    with pytest.raises(SpecError):
        parse_spec("{not json")


def test_spec_is_immutable():
    spec = JobSpec()
    with pytest.raises(Exception):
        spec.method = Method.dpo


def test_help_text_is_written_once_and_documented_in_readme():
    assert "LoRA rank" in field_help("lora.r")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert spec_fields_markdown() in readme, "README's spec table is stale: python -m backend.spec > table"
