"""Demo recipes in the Train form: a built-in model's settings measured to make it learn (``backend.api.demo_recipe``)
as form values, which fields a model, method or environment change moves, the built-in datasets offered, and the
held-out count that follows the dataset. No Gradio here.
"""

from __future__ import annotations

from typing import Any

from backend.api import (
    CURATED_MODELS,
    RewardSpec,
    builtin_dataset_choices,
    demo_recipe,
    environment_choices,
    methods,
)
from components.train.fields import DEFAULTS, FORM_FIELDS, from_spec_value, rewards_text, set_path

# --- demo recipes: a built-in model's settings measured to make it learn (backend.api.demo_recipe) ----------------
# The field a recipe's spec path fills: the plain fields by their path, and two hand-mapped ones.
_RECIPE_FIELD = {
    "dataset.name": "builtin_dataset",
    "rollout.rewards": "rollout_rewards",
    **{f.path: name for name, f in FORM_FIELDS.items() if not f.derived},
}


def recipe_values(model: str | None, method: str | None, environment: str | None = None) -> dict[str, Any]:
    """The demo recipe of (``model``, ``method``, ``environment``) as form values (field name -> value); {} where it
    has none."""
    values: dict[str, Any] = {}
    for path, value in demo_recipe(model, method, environment).items():
        name = _RECIPE_FIELD[path]  # a KeyError here: a recipe setting the form has no field for
        if name == "rollout_rewards":
            values[name] = rewards_text([RewardSpec(**reward) for reward in value])
        elif name == "builtin_dataset":
            values[name] = value
        else:
            values[name] = from_spec_value(FORM_FIELDS[name], value)
    return values


# Every field some built-in model's recipe sets (alone or in an environment), and the dataset (which a method change
# moves too).
RECIPE_FIELDS: tuple[str, ...] = tuple(
    name
    for name in FORM_FIELDS
    if name == "builtin_dataset"
    or any(
        name in recipe_values(model, method, environment)
        for model in CURATED_MODELS
        for method in methods()
        for environment in environment_choices()
    )
)


def dataset_choices(model: str | None, method: str, environment: str | None = None) -> list[str]:
    """The built-in datasets offered for ``method``: the model's demo-recipe dataset first, then the others."""
    suited = builtin_dataset_choices(method)
    first = demo_recipe(model, method, environment).get("dataset.name")
    return [first, *(name for name in suited if name != first)] if first in suited else suited


def pick_dataset(model: str | None, method: str, current: str | None, environment: str | None = None) -> str:
    """The built-in dataset after a method change: the one picked if it suits ``method``, else the first choice."""
    choices = dataset_choices(model, method, environment)
    return current if current in choices else choices[0]


def _plain(name: str, method: str) -> Any:
    """A field's value without a recipe: its plain default; the method's first built-in dataset for the dataset."""
    return builtin_dataset_choices(method)[0] if name == "builtin_dataset" else DEFAULTS[name]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    return a == b


def recipe_updates(values: dict[str, Any], before: tuple[str, ...], after: tuple[str, ...]) -> dict[str, Any]:
    """The fields that change when the form goes from the (base model, method[, environment]) ``before`` to ``after``.

    A field still holding ``before``'s recipe value or its plain default takes ``after``'s recipe value (its plain
    default where ``after`` has no recipe, or the recipe names no value for it); a value the user typed is kept. The
    built-in dataset the user picked is kept too while it suits ``after``'s method (else the first choice).
    """
    old, new = recipe_values(*before), recipe_values(*after)
    updates: dict[str, Any] = {}
    for name in RECIPE_FIELDS:
        current = values[name]
        if any(_same(current, v) for v in (old.get(name, _plain(name, before[1])), _plain(name, before[1]))):
            target = new.get(name, _plain(name, after[1]))
        elif name == "builtin_dataset":
            target = pick_dataset(*after[:2], current, *after[2:])
        else:
            continue
        if not _same(target, current):
            updates[name] = target
    return updates


# Form field -> the value it starts with: the plain defaults under the starting model's recipe for the starting
# method. The order is the order of the Gradio inputs (components/train/layout.py).
FIELDS: dict[str, Any] = {**DEFAULTS, **recipe_values(DEFAULTS["base_model"], DEFAULTS["method"])}

# What a "which value now" helper answers for "leave the field as it is".
KEEP = object()


def _recipes_own_data(v: dict[str, Any], recipe: dict[str, Any]) -> bool:
    """Whether the form trains on the recipe's own dataset (the built-in one it was measured on)."""
    source = v.get("dataset_source") or "builtin"
    return source == "builtin" and v.get("builtin_dataset") == recipe.get("builtin_dataset")


def adapt_holdout(v: dict[str, Any], spec: dict[str, Any]) -> None:
    """A recipe's held-out rows are measured for its own dataset: on any other (an upload, a Hub dataset, another
    built-in) the count the recipe filled in becomes ``auto``, which the dataset's size decides (a tenth, at most 128,
    none for a tiny one). A count the user typed is sent as typed."""
    recipe = recipe_values(v["base_model"], v["method"], v["env_name"])
    if "holdout_rows" not in recipe or not _same(v["holdout_rows"], recipe["holdout_rows"]):
        return
    if not _recipes_own_data(v, recipe):
        set_path(spec, "eval.holdout_rows", "auto")


def holdout_shown(values: dict[str, Any]) -> Any:
    """What the *Held-out rows* box shows after the dataset changed: empty (``auto``, the dataset's size decides)
    where it held the recipe's count and the data is no longer the recipe's own, the recipe's count back on its own
    data where it was empty; :data:`KEEP` (leave it) otherwise, a count the user typed included.

    >>> arith = {**FIELDS, "dataset_source": "upload"}
    >>> holdout_shown(arith) is None, holdout_shown({**arith, "holdout_rows": 7}) is KEEP
    (True, True)
    >>> holdout_shown({**FIELDS, "holdout_rows": None}) == FIELDS["holdout_rows"]
    True
    """
    v = {**FIELDS, **values}
    recipe = recipe_values(v["base_model"], v["method"], v["env_name"])
    if "holdout_rows" not in recipe:
        return KEEP
    current, own = v["holdout_rows"], _recipes_own_data(v, recipe)
    if own and current in (None, ""):
        return recipe["holdout_rows"]
    if not own and _same(current, recipe["holdout_rows"]):
        return None
    return KEEP
