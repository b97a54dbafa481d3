"""The TRL CLI config of a job parses with TRL's own CLI parsers into the settings the app trains with."""

from __future__ import annotations

import importlib

import pytest
import yaml

from backend.core.spec import parse_spec
from backend.hub.trl_cli import trl_cli_config, trl_cli_yaml

# Shared TrainingArguments fields the app sets from the spec; the CLI config must give TRL the same values.
TRAINING_FIELDS = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "warmup_steps",
    "seed",
    "logging_steps",
    "save_steps",
    "save_total_limit",
    "gradient_checkpointing",
)

SFT = {
    "method": "sft",
    "model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "main"},
    "dataset": {"source": "hub", "name": "trl-lib/Capybara", "config": "default", "split": "train"},
    "lora": {"r": 8, "alpha": 16, "dropout": 0.1, "target_modules": ["q_proj", "k_proj", "v_proj"]},
    "quantization": {"mode": "4bit"},
    "training": {
        "max_steps": 30,
        "learning_rate": 1e-4,
        "batch_size": 4,
        "gradient_accumulation_steps": 2,
        "max_length": 512,
        "warmup_ratio": 0.1,
        "seed": 7,
        "logging_steps": 5,
        "save_steps": 10,
    },
    "sft": {"completion_only_loss": False, "packing": True},
    "output": {"run_name": "capybara sft"},
}
DPO = {
    "method": "dpo",
    "model": {"name_or_path": "builtin:tiny-qwen3"},
    "dataset": {"source": "builtin", "name": "preferences-demo"},
    "lora": {"r": 4, "alpha": 8},
    "quantization": {"mode": "8bit"},
    "training": {"epochs": 2.0, "learning_rate": 5e-6, "max_length": 256, "gradient_checkpointing": False},
    "dpo": {"beta": 0.25, "loss_type": "ipo"},
}
GRPO = {
    "method": "grpo",
    "model": {"name_or_path": "Qwen/Qwen3-0.6B"},
    "dataset": {"source": "hub", "name": "trl-lib/DeepMath-103K", "split": "train"},
    "lora": {"enabled": True, "target_modules": "all-linear"},
    "training": {"max_steps": 50, "batch_size": 8, "gradient_accumulation_steps": 2},
    "grpo": {
        "num_generations": 8,
        "max_completion_length": 512,
        "temperature": 0.7,
        "top_p": 0.95,
        "beta": 0.04,
        "loss_type": "dr_grpo",
        "enable_thinking": False,
        "use_vllm": "off",
        "rewards": [{"name": "accuracy", "weight": 1.0}, {"name": "think_format", "weight": 0.25}],
    },
}


def parse_like_trl_cli(method: str, text: str, tmp_path):
    """Parse a config file exactly as ``trl <method> --config FILE`` does (trl/cli/commands/training.py).

    ``--bf16 false`` is added on the command line because TRL's configs default to bf16, which a CPU-only test
    machine refuses; the config's own values are what is checked.
    """
    path = tmp_path / f"{method}.yaml"
    path.write_text(text)
    script = importlib.import_module(f"trl.scripts.{method}")
    parser = script.make_parser(prog=f"trl {method}")
    *parsed, config_remaining, cli_remaining = parser.parse_args_and_config(
        ["--config", str(path), "--bf16", "false"], return_remaining_strings=True, separate_remaining_strings=True
    )
    # The CLI hands leftovers to `accelerate launch`: a key TRL does not know would break the launch.
    assert config_remaining == [] and cli_remaining == []
    return parsed


def comments(text: str) -> str:
    """The YAML's comments as one line of prose (they are wrapped at 100 columns)."""
    return " ".join(line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#"))


def app_config(spec, tmp_path):
    """The config object the app itself builds for the spec (backend/training/*)."""
    if spec.method.value == "sft":
        from backend.methods.sft import to_sft_config

        return to_sft_config(spec, tmp_path / "out", "conversational", assistant_masks=True)
    if spec.method.value == "dpo":
        from backend.methods.dpo import to_dpo_config

        return to_dpo_config(spec, tmp_path / "out")
    from backend.methods.grpo import to_grpo_config

    return to_grpo_config(spec, tmp_path / "out", [r.weight for r in spec.rollout.rewards])


def test_sft_config_with_qlora_parses_into_the_apps_settings(tmp_path):
    from trl import get_peft_config, get_quantization_config

    from backend.models.loading import to_bnb_config, to_peft_config

    spec = parse_spec(SFT)
    script_args, args, model_args, _ = parse_like_trl_cli("sft", trl_cli_yaml(spec), tmp_path)

    assert script_args.dataset_name == "trl-lib/Capybara"
    assert script_args.dataset_config == "default" and script_args.dataset_train_split == "train"
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-0.5B-Instruct" and model_args.model_revision == "main"
    assert args.output_dir == "capybara-sft" and args.run_name == "capybara sft"
    assert (args.learning_rate, args.max_steps, args.per_device_train_batch_size) == (1e-4, 30, 4)
    assert (args.gradient_accumulation_steps, args.seed, args.logging_steps, args.save_steps) == (2, 7, 5, 10)
    assert args.warmup_steps == 0.1  # transformers 5: a ratio below 1
    assert (args.max_length, args.packing, args.completion_only_loss) == (512, True, False)
    app = app_config(spec, tmp_path)
    for name in (*TRAINING_FIELDS, "max_length", "packing"):
        assert getattr(args, name) == getattr(app, name), name

    peft, app_peft = get_peft_config(model_args), to_peft_config(spec.lora)
    assert (peft.r, peft.lora_alpha, peft.lora_dropout) == (8, 16, 0.1)
    assert set(peft.target_modules) == set(app_peft.target_modules) == {"q_proj", "k_proj", "v_proj"}
    bnb, app_bnb = get_quantization_config(model_args), to_bnb_config(spec.quantization)
    assert bnb.load_in_4bit and app_bnb.load_in_4bit
    assert bnb.bnb_4bit_quant_type == app_bnb.bnb_4bit_quant_type == "nf4"
    assert bnb.bnb_4bit_use_double_quant is app_bnb.bnb_4bit_use_double_quant is True


def test_dpo_config_for_builtin_data_parses_and_says_what_to_upload(tmp_path):
    from trl import get_quantization_config

    spec = parse_spec(DPO)
    text = trl_cli_yaml(spec)
    script_args, args, model_args, _ = parse_like_trl_cli("dpo", text, tmp_path)

    assert script_args.dataset_name == "YOUR_USERNAME/preferences-demo"
    notes = comments(text)
    assert "hf upload YOUR_USERNAME/preferences-demo preferences-demo.jsonl --repo-type dataset" in notes
    assert model_args.model_name_or_path == "YOUR_USERNAME/tiny-qwen3"
    assert "builtin:tiny-qwen3 is the app's tiny random demo model" in notes
    assert (args.beta, args.loss_type, args.num_train_epochs, args.max_length) == (0.25, ["ipo"], 2.0, 256)
    assert args.gradient_checkpointing is False
    app = app_config(spec, tmp_path)
    for name in (*TRAINING_FIELDS, "max_length", "beta", "loss_type"):
        assert getattr(args, name) == getattr(app, name), name
    assert (model_args.use_peft, model_args.lora_r, model_args.lora_alpha) == (True, 4, 8)
    assert get_quantization_config(model_args).load_in_8bit


def test_grpo_config_names_trls_reward_functions_and_parses(tmp_path):
    import trl.rewards
    from trl import get_peft_config

    spec = parse_spec(GRPO)
    script_args, args, model_args, _ = parse_like_trl_cli("grpo", trl_cli_yaml(spec), tmp_path)

    # TRL's grpo script looks these names up in its reward registry, which holds TRL's reward functions.
    assert script_args.reward_funcs == ["accuracy_reward", "think_format_reward"]
    assert all(callable(getattr(trl.rewards, name)) for name in script_args.reward_funcs)
    assert args.reward_weights == [1.0, 0.25]
    assert (args.num_generations, args.max_completion_length, args.temperature, args.top_p) == (8, 512, 0.7, 0.95)
    assert (args.beta, args.loss_type, args.chat_template_kwargs) == (0.04, "dr_grpo", {"enable_thinking": False})
    app = app_config(spec, tmp_path)
    for name in (
        *TRAINING_FIELDS,
        "num_generations",
        "max_completion_length",
        "temperature",
        "top_p",
        "beta",
        "loss_type",
        "reward_weights",
        "log_completions",
        "chat_template_kwargs",
        "use_vllm",
    ):
        assert getattr(args, name) == getattr(app, name), name
    assert get_peft_config(model_args).target_modules == "all-linear"
    assert not model_args.load_in_4bit and not model_args.load_in_8bit


def test_app_only_rewards_and_environments_become_comments_not_keys(tmp_path):
    spec = parse_spec(
        {
            **GRPO,
            "grpo": {
                **GRPO["grpo"],
                "rewards": [
                    {"name": "accuracy"},
                    {"name": "length", "target_length": 20, "tolerance": 5, "weight": 0.5},
                ],
            },
        }
    )
    text = trl_cli_yaml(spec)
    config = yaml.safe_load(text)
    assert config == trl_cli_config(spec)
    assert config["reward_funcs"] == ["accuracy_reward"]
    assert "reward_weights" not in config, "weights would not line up with the functions TRL gets"
    assert "length(target_length=20, tolerance=5) weight 0.5" in comments(text)
    assert "dotted import paths in reward_funcs" in comments(text)
    parse_like_trl_cli("grpo", text, tmp_path)

    env_spec = parse_spec(
        {
            "method": "grpo",
            "model": {"name_or_path": "Qwen/Qwen3-0.6B"},
            "dataset": {"source": "builtin", "name": "echo-demo"},
            "environment": {"name": "builtin:echo"},
            "training": {"batch_size": 4},
        }
    )
    env_text = trl_cli_yaml(env_spec)
    assert "the TRL CLI cannot attach an environment" in comments(env_text)
    assert "reward_funcs" not in yaml.safe_load(env_text)
    parse_like_trl_cli("grpo", env_text, tmp_path)


def test_a_split_slice_becomes_the_split_name_and_a_note(tmp_path):
    spec = parse_spec({**SFT, "dataset": {**SFT["dataset"], "split": "train[:500]"}, "quantization": {"mode": "none"}})
    text = trl_cli_yaml(spec)
    script_args, *_ = parse_like_trl_cli("sft", text, tmp_path)
    assert script_args.dataset_train_split == "train"
    assert "the app loaded the slice 'train[:500]'" in comments(text)


@pytest.mark.parametrize("lora", [{"enabled": False}, {"target_modules": "all-linear"}])
def test_full_fine_tuning_and_all_linear_round_trip(lora, tmp_path):
    spec = parse_spec({**SFT, "lora": lora, "quantization": {"mode": "none"}})
    _, _, model_args, _ = parse_like_trl_cli("sft", trl_cli_yaml(spec), tmp_path)
    assert model_args.use_peft is spec.lora.enabled
    if spec.lora.enabled:
        assert model_args.lora_target_modules == "all-linear"


def test_an_auto_batch_becomes_trls_own_batch_search(tmp_path):
    spec = parse_spec({**SFT, "training": {**SFT["training"], "batch_size": "auto"}})
    _, args, _, _ = parse_like_trl_cli("sft", trl_cli_yaml(spec), tmp_path)
    assert args.auto_find_batch_size is True and args.per_device_train_batch_size == 16
    assert not parse_like_trl_cli("sft", trl_cli_yaml(parse_spec(SFT)), tmp_path)[1].auto_find_batch_size
