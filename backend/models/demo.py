"""Builds the offline demo model: a tiny random Qwen3 with a byte-level BPE tokenizer and TRL's qwen3 template."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from backend.core.hub_names import ARITH_MODEL_ID, BUILTIN_MODELS, DEMO_MODEL_ID
from backend.core.paths import ASSETS_DIR
from backend.core.spec import environment_methods

DEMO_MODEL_DIRNAME = "tiny-qwen3"
# Bump when the recipe changes so an old build on disk is rebuilt rather than silently reused.
DEMO_MODEL_RECIPE = 4
# What the UI says wherever the demo model appears: it is honest about what a random tiny model can show.
DEMO_MODEL_NOTE = (
    f"{DEMO_MODEL_ID} is a random tiny model (Qwen3 architecture, random weights, built on this machine in seconds). "
    "It shows the plumbing: jobs run, loss curves fall, adapters save and load, both chat sides stream. "
    "It cannot give sensible answers, before or after training: expect gibberish in the chat. "
    "Pick a real model (e.g. Qwen/Qwen2.5-0.5B-Instruct) for answers worth reading."
)


# The built-in model that already knows a little: the same architecture family, tokenizer and chat template, pre-trained
# by scripts/build_arith_model.py on small-integer arithmetic (backend/data/arith.py) and stopped on purpose at a
# partial skill, so every method has room to improve it. Its weights ship in backend/assets/models/.
ARITH_MODEL_DIR = ASSETS_DIR / "models" / "tiny-qwen3-arith"
ARITH_MODEL_RECIPE = 3
ARITH_MODEL_CONFIG = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)
ARITH_MODEL_NOTE = (
    f"{ARITH_MODEL_ID} is a tiny model pre-trained on this project's synthetic arithmetic chats (sums and differences "
    "of numbers below 50, answered as `a + b = \\boxed{c}`) and stopped on purpose at a partial skill: it answers "
    "about two in five unseen problems right, and in the arithmetic environment it seldom submits them with its "
    "submit_answer tool. Training on the arith-* datasets (or GRPO in the environment) makes it better, and the job's "
    "learning verdict says by how much. It knows nothing else: other questions get arithmetic-shaped answers."
)


def is_demo_model(name: str | None) -> bool:
    """Whether a base model name is one of the built-in tiny models (random, or arithmetic)."""
    return (name or "").strip() in BUILTIN_MODELS


def demo_model_note(name: str | None) -> str:
    """What the UI says of a built-in tiny model; empty for any other model."""
    name = (name or "").strip()
    return {DEMO_MODEL_ID: DEMO_MODEL_NOTE, ARITH_MODEL_ID: ARITH_MODEL_NOTE}.get(name, "")


# GRPO's and RLOO's: the same rollout (groups of 8 sampled answers scored by TRL's accuracy reward) and steps.
_ONLINE_RECIPE: dict[str, Any] = {
    "dataset.name": "arith-prompts",
    "rollout.num_generations": 8,
    "rollout.max_completion_length": 24,
    "rollout.temperature": 0.7,
    "rollout.rewards": [{"name": "accuracy", "weight": 1.0}],
    "lora.dropout": 0.0,
    "training.max_steps": 300,
    "training.learning_rate": 1e-3,
    "training.batch_size": 16,
    "training.max_length": 128,
    "eval.holdout_rows": 256,
}


# Settings measured to make builtin:tiny-qwen3-arith learn, per method: the values of examples/<method>-demo.yaml
# (benchmarks/learning.py measures those) that the Train form can set, by dotted spec path. The spec's generic
# defaults (learning rate 2e-4, the form's 30 steps) teach it nothing; values equal to the spec's default (LoRA r 16,
# DPO and KTO beta 0.1) are left out, as are a run's name and its checkpoint interval.
# tests/unit/ui/test_demo_recipes.py holds each recipe equal to its example: change them together.
DEMO_RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    ARITH_MODEL_ID: {
        "sft": {
            "dataset.name": "arith-sft",
            "training.max_steps": 150,
            "training.learning_rate": 2e-3,
            "training.batch_size": 16,
            "training.max_length": 128,
            "eval.holdout_rows": 256,
        },
        "dpo": {
            "dataset.name": "arith-preferences",
            "training.max_steps": 60,
            "training.learning_rate": 5e-4,
            "training.batch_size": 8,
            "training.max_length": 128,
            "eval.holdout_rows": 128,
        },
        "kto": {
            "dataset.name": "arith-feedback",
            "kto.beta": 0.5,
            "kto.desirable_weight": 2.0,
            "training.max_steps": 150,
            "training.learning_rate": 1e-3,
            "training.batch_size": 8,
            "training.max_length": 128,
            "eval.holdout_rows": 256,
        },
        "grpo": _ONLINE_RECIPE,
        "rloo": _ONLINE_RECIPE,
        "reward": {
            "dataset.name": "arith-preferences",
            "training.max_steps": 750,
            "training.learning_rate": 3e-3,
            "training.batch_size": 16,
            "training.max_length": 128,
            "eval.holdout_rows": 256,
        },
        "distillation": {
            "dataset.name": "arith-prompts",
            # No teacher: it is a finished job of the user's own (examples/distillation-demo.yaml: the sft-demo job's).
            "distillation.max_completion_length": 24,
            "lora.dropout": 0.0,
            "training.max_steps": 60,
            "training.learning_rate": 2e-3,
            "training.batch_size": 16,
            "training.max_length": 128,
            "eval.holdout_rows": 256,
        },
    },
}


# Settings measured to make a built-in model learn in a built-in environment, laid over its method's recipe when a
# method that plays environments plays that one: the values of examples/grpo-env-demo.yaml that depart from GRPO's
# recipe (benchmarks/learning.py measures the example). Its reward is the environment's, so no extra reward; the
# example keeps the spec's LoRA dropout.
# tests/unit/ui/test_demo_recipes.py holds it equal to the example.
ENVIRONMENT_RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    ARITH_MODEL_ID: {
        "builtin:arithmetic": {
            "dataset.name": "arith-env",
            "rollout.max_completion_length": 96,
            "rollout.rewards": [],
            "environment.max_tool_calling_iterations": 1,
            "environment.eval_episodes": 128,
            "training.max_steps": 40,
            "training.max_length": 1024,
            "eval.holdout_rows": 128,
            "lora.dropout": 0.05,
        },
    },
}


def demo_recipe(model: str | None, method: str | None, environment: str | None = None) -> dict[str, Any]:
    """The settings measured to make a built-in model learn with ``method`` (dotted spec path -> value), in
    ``environment`` where one is named and the method plays it; {} for any other model or method.

    >>> demo_recipe("builtin:tiny-qwen3-arith", "dpo")["dataset.name"], demo_recipe("Qwen/Qwen3-0.6B", "sft")
    ('arith-preferences', {})
    >>> demo_recipe("builtin:tiny-qwen3-arith", "grpo", "builtin:arithmetic")["dataset.name"]
    'arith-env'
    """
    model = (model or "").strip()
    recipe = dict(DEMO_RECIPES.get(model, {}).get(method or "", {}))
    if recipe:
        recipe.update(environment_recipe(model, method, environment))
    return copy.deepcopy(recipe)  # a caller may change its copy (the rewards list), never the table


def environment_recipe(model: str | None, method: str | None, environment: str | None) -> dict[str, Any]:
    """The settings measured to make ``model`` learn in ``environment`` with ``method`` (its entry of
    :data:`ENVIRONMENT_RECIPES`), {} where none was measured or the method plays no environment. Such a recipe starts
    from the base model itself (no parent job): the model learned to call the environment's tools without a warm-up.

    >>> environment_recipe("builtin:tiny-qwen3-arith", "grpo", "builtin:arithmetic")["rollout.max_completion_length"]
    96
    >>> environment_recipe("builtin:tiny-qwen3-arith", "sft", "builtin:arithmetic"), environment_recipe(
    ...     "builtin:tiny-qwen3-arith", "grpo", "builtin:echo")
    ({}, {})
    """
    model = (model or "").strip()
    if method not in {m.value for m in environment_methods()} or not DEMO_RECIPES.get(model, {}).get(method or ""):
        return {}
    return copy.deepcopy(ENVIRONMENT_RECIPES.get(model, {}).get((environment or "").strip(), {}))


_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]


# The datasets the tokenizer's merges are learned from, fixed: a dataset added later must not change the tokenizer,
# which builtin:tiny-qwen3-arith ships pre-trained on (tests/unit/models/test_arith_model.py holds the two equal).
TOKENIZER_CORPUS = (
    "arithmetic-demo",
    "chat-demo",
    "echo-demo",
    "echo-tools-sft",
    "feedback-demo",
    "math-demo",
    "preferences-demo",
    "wordle-demo",
)


def _training_corpus() -> list[str]:
    """Text the tokenizer's merges are learned from: the first demo datasets plus chat-template scaffolding."""
    from backend.core.paths import BUILTIN_DATASETS_DIR

    lines: list[str] = ["system user assistant tool", "Hello! How can I help you today?"]
    for name in TOKENIZER_CORPUS:
        lines.extend((BUILTIN_DATASETS_DIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines())
    return lines


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    tok = Tokenizer(models.BPE())
    # One token per digit (as Qwen's and Llama 3's tokenizers do): a number's digits line up, so sums can be learned.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=_SPECIAL_TOKENS[1:],
    )
    fast.chat_template = qwen3_chat_template
    fast.model_max_length = 2048
    return fast


def build_demo_model(target: Path, seed: int = 0) -> Path:
    """Build the tiny model into ``target`` (weights deterministic from ``seed``) and return it."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = _build_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        initializer_range=0.2,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True, max_new_tokens=64
    )
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    (target / "studio_demo.json").write_text(json.dumps({"recipe": DEMO_MODEL_RECIPE, "seed": seed}))
    return target


def _is_current(path: Path) -> bool:
    marker = path / "studio_demo.json"
    try:
        return json.loads(marker.read_text())["recipe"] == DEMO_MODEL_RECIPE
    except (OSError, ValueError, KeyError):
        return False


def ensure_demo_model(models_dir: Path) -> Path:
    """Return the demo model directory, building it once; safe when several processes ask at the same time."""
    models_dir.mkdir(parents=True, exist_ok=True)
    final = models_dir / DEMO_MODEL_DIRNAME
    if _is_current(final):
        return final
    with open(models_dir / f".{DEMO_MODEL_DIRNAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_current(final):
            return final
        # Build beside the target and rename, so a crash mid-build never leaves a half model behind.
        staging = Path(tempfile.mkdtemp(prefix=".building-", dir=models_dir))
        try:
            build_demo_model(staging)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final
