"""JobSpec: defaults, validation messages a person can act on, JSON round trip, documented fields."""

import json

import pytest
from pydantic import ValidationError

from backend.core.spec import JobSpec, Method, SpecError, field_help, parse_spec, spec_fields_markdown
from backend.models.demo import DEMO_MODEL_ID
from tests.helpers import ROOT


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
    assert json.loads(text)["schema_version"] == 2


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"training": {"learning_rate": -1}}, "training.learning_rate: must be greater than 0 (got -1)"),
        ({"training": {"batch_size": 0}}, "training.batch_size: must be from 1 to 1024, or auto (got 0)"),
        ({"training": {"max_steps": 0}}, "training.max_steps: must be greater than 0 (got 0)"),
        ({"training": {"epochs": 0}}, "training.epochs: must be greater than 0 (got 0)"),
        ({"lora": {"r": -4}}, "lora.r: must be greater than 0 (got -4)"),
        ({"training": {"learnin_rate": 1e-4}}, "training.learnin_rate: unknown setting"),
        ({"method": "ppo"}, "method: Input should be 'sft', 'dpo', 'grpo', 'kto', 'rloo', 'reward' or 'distillation'"),
        ({"quantization": {"mode": "3bit"}}, "quantization.mode: Input should be 'none', '4bit' or '8bit'"),
        ({"schema_version": 99}, "schema_version: this app reads spec versions 1 and 2; got 99"),
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
    with pytest.raises(ValidationError):
        spec.method = Method.dpo


def test_help_text_is_written_once_and_documented_in_the_spec_docs():
    assert "LoRA rank" in field_help("lora.r")
    doc = (ROOT / "docs" / "spec.md").read_text()
    assert spec_fields_markdown() in doc, "docs/spec.md is stale: python scripts/build_spec_docs.py"
    assert doc.count("Each entry of `rollout.rewards`:") == 1, "the rewards table is in docs/spec.md once"


def _grpo_reward(**reward) -> dict:
    return {"method": "grpo", "grpo": {"rewards": [reward]}}


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"training": {"epochs": float("inf")}}, "training.epochs: must be a finite number (got inf)"),
        ({"training": {"learning_rate": "nan"}}, "training.learning_rate: must be a finite number (got 'nan')"),
        ({"training": {"max_steps": float("inf")}}, "training.max_steps: must be a finite number (got inf)"),
        ({"grpo": {"beta": float("inf")}}, "grpo.beta: must be a finite number (got inf)"),
        (
            _grpo_reward(name="accuracy", weight=float("nan")),
            "rollout.rewards.0.weight: must be a finite number (got nan)",
        ),
        (
            _grpo_reward(
                name="valid_json", json_schema={"type": "object", "properties": {"x": {"maximum": float("inf")}}}
            ),
            "rollout.rewards.0.json_schema: must hold only finite numbers (got inf at properties.x.maximum)",
        ),
    ],
)
def test_non_finite_numbers_are_refused_with_one_sentence_per_field(data, expected):
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert err.value.problems == [expected]


def test_non_finite_numbers_in_json_text_are_refused():
    with pytest.raises(SpecError) as err:
        parse_spec('{"training": {"epochs": Infinity}, "grpo": {"temperature": NaN}}')
    assert err.value.problems == [
        "training.epochs: must be a finite number (got inf)",
        "rollout.temperature: must be a finite number (got nan)",
    ]


def test_a_json_schema_nested_without_end_is_refused_not_a_crash():
    schema: dict = {}
    inner = schema
    for _ in range(5000):
        inner["items"] = {}
        inner = inner["items"]
    with pytest.raises(SpecError) as err:
        parse_spec(_grpo_reward(name="valid_json", json_schema=schema))
    assert err.value.problems == ["rollout.rewards.0.json_schema: must not nest deeper than 64 levels"]


@pytest.mark.parametrize("repo_id", ["me/x", "Org_1/my.adapter-v2", "a/" + "b" * 96])
def test_valid_hub_repo_ids_are_accepted(repo_id):
    assert parse_spec({"output": {"hub_repo_id": repo_id}}).output.hub_repo_id == repo_id


@pytest.mark.parametrize(
    "repo_id", ["no-slash", "a/b/c", "a--b/c", "a/b..c", "-a/b", "a/b.", "a/" + "b" * 97, "a b/c", "a/ü", ""]
)
def test_hub_repo_id_follows_the_hubs_rules_even_without_a_push(repo_id):
    with pytest.raises(SpecError) as err:
        parse_spec({"output": {"hub_repo_id": repo_id, "push_to_hub": False}})
    [problem] = err.value.problems
    assert problem.startswith("output.hub_repo_id: must be a Hub repo id: owner/name")


@pytest.mark.parametrize(
    "field, data",
    [
        ("output.run_name", {"output": {"run_name": "line one\nline two"}}),
        ("output.run_name", {"output": {"run_name": "bell\x07"}}),
        ("owner", {"owner": "ali\x00ce"}),
        ("owner", {"owner": "al\u2028ice"}),
    ],
)
def test_names_refuse_control_characters(field, data):
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    [problem] = err.value.problems
    assert problem.startswith(f"{field}: must not contain control characters")


def test_seed_is_bounded_by_what_numpy_and_torch_accept():
    assert parse_spec({"training": {"seed": 2**32 - 1}}).training.seed == 2**32 - 1
    with pytest.raises(SpecError) as err:
        parse_spec({"training": {"seed": 2**32}})
    assert err.value.problems == ["training.seed: must be less than or equal to 4294967295 (got 4294967296)"]


@pytest.mark.parametrize(
    "data",
    [
        {"output": {"run_name": "x" * 20_000_000}},
        {"k" * 20_000_000: 1},
        {"dataset": {"columns": {"messages": "c", "k" * 1_000_000: 3}}},
        _grpo_reward(name="regex", pattern="(" * 100_000),
        _grpo_reward(name="regex", pattern="[" + "x" * 100_000),
        {"method": "grpo", "environment": {"name": "builtin:" + "z" * 1_000_000}},
        {"method": "grpo", "environment": {"name": "not an env " * 100_000}},
        "{" + " " * 1_000_000,
    ],
)
def test_a_huge_input_gives_a_short_refusal(data):
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert err.value.problems and all(len(p) < 700 for p in err.value.problems), [len(p) for p in err.value.problems]
    assert any("\u2026" in p for p in err.value.problems), "the echoed input is cut with an ellipsis"


def test_a_version_1_spec_loads_with_its_sampling_and_rewards_moved_to_rollout():
    """Every stored job before rollout had sampling and rewards under grpo (schema_version 1), an SFT job too."""
    old = {
        "schema_version": 1,
        "method": "grpo",
        "training": {"batch_size": 8},
        "grpo": {
            "num_generations": 8,
            "temperature": 0.7,
            "beta": 0.04,
            "rewards": [{"name": "length", "target_length": 5}],
        },
    }
    spec = parse_spec(json.dumps(old))
    assert spec.schema_version == 2
    assert (spec.rollout.num_generations, spec.rollout.temperature) == (8, 0.7)
    assert [r.name for r in spec.rollout.rewards] == ["length"] and spec.grpo.beta == 0.04
    assert parse_spec(spec.to_json()) == spec  # what the store writes back reads the same
    assert parse_spec({"schema_version": 1, "grpo": {"log_completions": False}}).rollout.log_completions is False
    with_env = parse_spec({"method": "grpo", "environment": {"name": "builtin:echo"}, "training": {"batch_size": 4}})
    assert with_env.rollout.rewards == []  # the environment is the reward


def test_a_rollout_setting_given_in_both_places_is_refused():
    with pytest.raises(SpecError, match=r"grpo.temperature: give it once, as rollout.temperature"):
        parse_spec({"grpo": {"temperature": 0.5}, "rollout": {"temperature": 0.9}})


def test_an_environment_needs_a_method_that_plays_one_and_rewards_an_online_method():
    with pytest.raises(SpecError, match="environment.name is only used by GRPO: set method to grpo"):
        parse_spec({"method": "dpo", "environment": {"name": "builtin:echo"}})
    with pytest.raises(SpecError, match="rollout.rewards: GRPO needs at least one reward function, or an environment"):
        parse_spec({"method": "grpo", "rollout": {"rewards": []}, "training": {"batch_size": 4}})


def test_rloo_reads_the_rollout_and_plays_no_environment():
    spec = parse_spec({"method": "rloo", "rollout": {"num_generations": 8}, "training": {"batch_size": 16}})
    assert spec.rollout.num_generations == 8 and spec.rloo.beta == 0.05  # TRL's default
    with pytest.raises(SpecError, match="environment.name is only used by GRPO: set method to grpo"):
        parse_spec({"method": "rloo", "environment": {"name": "builtin:echo"}, "training": {"batch_size": 4}})
    with pytest.raises(SpecError, match=r"rollout.rewards: RLOO needs at least one reward function$"):
        parse_spec({"method": "rloo", "rollout": {"rewards": []}, "training": {"batch_size": 4}})
