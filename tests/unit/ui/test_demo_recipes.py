"""The arithmetic model's demo recipes (what the Train form fills in for it) are its examples' settings, so the two
cannot drift: examples/<method>-demo.yaml is what benchmarks/learning.py measures to learn."""

from __future__ import annotations

import pytest
import yaml

from backend.api import ARITH_MODEL_ID, JobSpec, demo_recipe, methods
from backend.core.spec import parse_spec
from tests.helpers import ROOT, leaves

EXAMPLES = {
    method: ROOT / "examples" / f"{method}-demo.yaml"
    for method in ("sft", "dpo", "kto", "grpo", "rloo", "reward", "distillation")
}
# Example settings the form does not fill in on purpose: a run's name, and where it saves checkpoints (neither
# changes what the model learns); the model and the dataset's source are the recipe's own premise; a distillation
# teacher is the user's own finished job, which no recipe can name.
NOT_RECIPE = ("output.", "training.save_steps", "model.name_or_path", "dataset.source", "distillation.teacher")
_MISSING = object()


def _get(tree, path: str):
    for name in path.split("."):
        if not isinstance(tree, dict) or name not in tree:
            return _MISSING
        tree = tree[name]
    return tree


def test_every_method_of_the_arith_model_has_a_recipe_and_other_models_none():
    assert set(EXAMPLES) == set(methods())
    assert all(demo_recipe(ARITH_MODEL_ID, method) for method in methods())
    assert demo_recipe("builtin:tiny-qwen3", "sft") == demo_recipe("Qwen/Qwen3-0.6B", "sft") == {}
    assert demo_recipe(ARITH_MODEL_ID, "no-such-method") == {} and demo_recipe(None, None) == {}
    recipe = demo_recipe(ARITH_MODEL_ID, "grpo")
    recipe["rollout.rewards"].append({"name": "length"})  # a caller's copy: the table is not changed
    assert demo_recipe(ARITH_MODEL_ID, "grpo")["rollout.rewards"] == [{"name": "accuracy", "weight": 1.0}]


@pytest.mark.parametrize("method", sorted(EXAMPLES))
def test_each_recipe_is_its_example(method):
    example = yaml.safe_load(EXAMPLES[method].read_text(encoding="utf-8"))
    recipe = demo_recipe(ARITH_MODEL_ID, method)
    assert example["method"] == method and example["model"]["name_or_path"] == ARITH_MODEL_ID
    assert example["dataset"]["source"] == "builtin"
    # Every setting the recipe names is the example's ...
    differ = {path: (value, _get(example, path)) for path, value in recipe.items() if _get(example, path) != value}
    assert not differ, f"demo_recipe({ARITH_MODEL_ID!r}, {method!r}) and {EXAMPLES[method].name} differ: {differ}"
    # ... and every example setting that departs from the spec's default is in the recipe (else the form would
    # train otherwise than the example measured).
    spec = parse_spec(example)
    default = JobSpec()
    departs = []
    for path in leaves(example):
        if path.startswith(NOT_RECIPE) or path in recipe or path == "method":
            continue
        value, plain = spec, default
        for name in path.split("."):
            value, plain = getattr(value, name), getattr(plain, name)
        if value != plain:
            departs.append(path)
    assert not departs, f"{EXAMPLES[method].name} sets {departs} away from the spec's defaults; add them to its recipe"


def test_each_recipe_is_a_valid_job_the_form_can_show():
    from components.train.form import FIELDS, form_to_spec
    from components.train.recipes import recipe_values

    for method in methods():
        values = recipe_values(ARITH_MODEL_ID, method)
        assert values["builtin_dataset"] == demo_recipe(ARITH_MODEL_ID, method)["dataset.name"]
        spec = parse_spec(form_to_spec({**FIELDS, "method": method, **values}))
        for path, value in demo_recipe(ARITH_MODEL_ID, method).items():
            got = spec
            for name in path.split("."):
                got = getattr(got, name)
            if path == "rollout.rewards":
                got = [reward.model_dump(exclude_defaults=True) | {"name": reward.name} for reward in got]
                value = [{k: v for k, v in reward.items() if k != "weight" or v != 1.0} for reward in value]
            assert got == value, (method, path)


# --- issue 37: an environment has its measured recipe too --------------------------------------------------------
ENV_EXAMPLE = ROOT / "examples" / "grpo-env-demo.yaml"


def test_the_arithmetic_environments_recipe_is_its_example():
    """The form's recipe for the arith model in builtin:arithmetic is examples/grpo-env-demo.yaml (measured improved
    in docs/benchmarks.md): every setting it names, and every setting the example departs from the defaults with."""
    example = yaml.safe_load(ENV_EXAMPLE.read_text(encoding="utf-8"))
    env = example["environment"]["name"]
    assert (example["method"], example["model"]["name_or_path"], env) == ("grpo", ARITH_MODEL_ID, "builtin:arithmetic")
    recipe = demo_recipe(ARITH_MODEL_ID, "grpo", env)
    spec, default = parse_spec(example), JobSpec()
    # Compared on the parsed job, so a setting the example leaves to its default (no extra reward with an
    # environment, LoRA dropout) counts at that default.
    differ = {
        path: (value, got) for path, value in recipe.items() if (got := _spec_value(spec, path, rewards=True)) != value
    }
    assert not differ, f"the builtin:arithmetic recipe and {ENV_EXAMPLE.name} differ: {differ}"
    departs = [
        path
        for path in leaves(example)
        if not path.startswith(NOT_RECIPE)
        and path not in recipe
        and path not in ("method", "environment.name")
        and _spec_value(spec, path) != _spec_value(default, path)
    ]
    assert not departs, f"{ENV_EXAMPLE.name} sets {departs} away from the spec's defaults; add them to its recipe"
    # Only a method that plays environments takes it; without the environment GRPO keeps its own recipe.
    assert demo_recipe(ARITH_MODEL_ID, "grpo")["dataset.name"] == "arith-prompts"
    assert demo_recipe(ARITH_MODEL_ID, "rloo", env) == demo_recipe(ARITH_MODEL_ID, "rloo")
    assert demo_recipe("Qwen/Qwen3-0.6B", "grpo", env) == {}


def _spec_value(spec, path: str, rewards: bool = False):
    for name in path.split("."):
        spec = getattr(spec, name)
    if rewards and path == "rollout.rewards":
        return [reward.model_dump(exclude_defaults=True) | {"name": reward.name} for reward in spec]
    return spec


def test_the_forms_job_for_builtin_arithmetic_is_the_examples():
    """Picking builtin:arithmetic on the form (GRPO on the arith model) makes the example's job: the spec the form
    sends equals the example's, field by field, but for the run's name and checkpoint interval."""
    from components.train.form import FIELDS, form_to_spec
    from components.train.recipes import recipe_updates

    env = "builtin:arithmetic"
    grpo = {
        **FIELDS,
        "method": "grpo",
        **recipe_updates(FIELDS, (ARITH_MODEL_ID, "sft", ""), (ARITH_MODEL_ID, "grpo", "")),
    }
    picked = {**grpo, "env_name": env}
    picked.update(recipe_updates(picked, (ARITH_MODEL_ID, "grpo", ""), (ARITH_MODEL_ID, "grpo", env)))
    assert picked["builtin_dataset"] == "arith-env"
    assert (picked["rollout_max_completion_length"], picked["env_max_iterations"], picked["env_eval_episodes"]) == (
        96,
        1,
        128,
    )
    assert (picked["max_steps"], picked["max_length"], picked["rollout_rewards"].strip()) == (40, 1024, "")
    form = parse_spec(form_to_spec(picked)).model_dump()
    example = parse_spec(yaml.safe_load(ENV_EXAMPLE.read_text(encoding="utf-8"))).model_dump()
    for spec in (form, example):
        spec.pop("output"), spec["training"].pop("save_steps"), spec.pop("owner", None)
    assert form == example
    # Leaving the environment puts GRPO's own recipe back.
    left = {**picked, "env_name": ""}
    left.update(recipe_updates(left, (ARITH_MODEL_ID, "grpo", env), (ARITH_MODEL_ID, "grpo", "")))
    assert left == grpo
