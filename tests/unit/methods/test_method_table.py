"""The method table: every method has a row, its form fields are real spec paths, and the trainer's config kwargs
are the TRL CLI export's (one function feeds both, so they cannot drift)."""

from __future__ import annotations

import ast
import re

import pytest

from backend.core.spec import JobSpec, Method, parse_spec
from backend.hub.trl_cli import trl_cli_config
from backend.methods.table import method_parts, plots_for, support, table
from tests.helpers import ROOT


def test_every_method_has_one_row_naming_its_spec_part():
    assert set(table()) == set(Method)
    for method, row in table().items():
        assert row.method is method
        assert row.spec_part in JobSpec.model_fields, f"{method}: no spec part {row.spec_part!r}"
        assert row.formats and all(f.columns for f in row.formats)
        assert row.summary and row.label == method.value.upper()
    assert method_parts() == {row.spec_part: m for m, row in table().items()}


@pytest.mark.parametrize("method", list(Method))
def test_plots_start_with_the_loss(method):
    assert plots_for(method)[0] == ("loss", "loss")


def _trainer_config(spec: JobSpec, tmp_path):
    """The config object the worker's trainer gets for ``spec``."""
    if spec.method is Method.sft:
        from backend.methods.sft import to_sft_config

        return to_sft_config(spec, tmp_path, "prompt-completion", assistant_masks=True)
    if spec.method is Method.grpo:
        from backend.methods.grpo import to_grpo_config

        return to_grpo_config(spec, tmp_path, [1.0])
    module = __import__(f"backend.methods.{spec.method.value}", fromlist=["x"])
    return getattr(module, f"to_{spec.method.value}_config")(spec, tmp_path)


NON_DEFAULT = {
    "sft": {"completion_only_loss": False, "packing": True},
    "dpo": {"beta": 0.3, "loss_type": "ipo"},
    "rloo": {"beta": 0.1, "normalize_advantages": True},
    "reward": {"center_rewards_coefficient": 0.01},
    "distillation": {"teacher": "Qwen/Qwen3-1.7B", "beta": 0.5, "max_completion_length": 64, "temperature": 0.7},
    "grpo": {
        "num_generations": 8,
        "max_completion_length": 64,
        "temperature": 0.7,
        "top_p": 0.9,
        "beta": 0.02,
        "loss_type": "grpo",
        "enable_thinking": False,
        "log_completions": False,
    },
}


@pytest.mark.parametrize("method", list(Method))
def test_the_trainers_config_kwargs_are_the_exports(method, tmp_path):
    part = support(method).spec_part
    spec = parse_spec(
        {
            "method": method.value,
            "model": {"name_or_path": "Qwen/Qwen3-0.6B"},
            "dataset": {"source": "hub", "name": "someone/data"},
            "training": {"max_length": 300, "batch_size": 8},
            part: NON_DEFAULT.get(part, {}),
        }
    )
    kwargs = support(method).config_kwargs(spec, None)
    exported = trl_cli_config(spec)
    trainer_config = _trainer_config(spec, tmp_path)
    assert kwargs, "a method with no settings of its own would not need a row"
    for key, value in kwargs.items():
        assert exported[key] == value, key
        assert getattr(trainer_config, key) == value, key


def test_only_the_table_knows_the_methods():
    """No backend or UI module outside methods/ (and the spec that defines them) names a method: no ``Method.x``, no
    comparison of a method with a name, no read of a method's own spec part (``spec.grpo``) but through the table."""
    allowed = {
        "backend/core/spec/job.py",
        "backend/workflows/warmup.py",
        "backend/data/loading.py",
    }  # workflows: a warm-up writes SFT demonstrations; data: a doctest
    names = {m.value for m in Method}
    offenders = []
    for path in sorted([*(ROOT / "backend").rglob("*.py"), *(ROOT / "components").rglob("*.py"), ROOT / "app.py"]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("backend/methods/") or rel in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Method":
                if node.attr in names:
                    offenders.append(f"{rel}:{node.lineno} Method.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in names and ast.unparse(node.value).endswith("spec"):
                offenders.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                named = any(isinstance(c, ast.Constant) and c.value in names for c in sides)
                if named and any("method" in ast.unparse(c) for c in sides if not isinstance(c, ast.Constant)):
                    offenders.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert offenders == []


def help_text() -> str:
    """What ``python -m backend --help`` prints."""
    from backend.cli import build_parser

    return build_parser().format_help()


def method_registries() -> dict[str, set[str]]:
    """Everything outside the table keyed by method, as the methods each one covers."""
    import trl

    from backend import worker_pool
    from backend.data.builtin import BUILTIN_DATASETS
    from backend.models.demo import ARITH_MODEL_ID, DEMO_RECIPES
    from components.jobs.monitor import compare_metrics

    exported = set(dir(trl))  # TRL's lazy module lists its exports without importing the trainers
    preimported, lazy = set(worker_pool.PREIMPORTS), set(worker_pool.LAZY_ATTRIBUTES["trl"])
    return {
        "worker pool's imports": {m.value for m in Method if f"backend.methods.{m.value}" in preimported},
        "worker pool's TRL classes": {m.value for m, row in table().items() if set(row.trl_classes) <= lazy},
        "TRL's exports": {m.value for m, row in table().items() if set(row.trl_classes) <= exported},
        "demo recipes": set(DEMO_RECIPES[ARITH_MODEL_ID]),
        "built-in datasets": {method for dataset in BUILTIN_DATASETS.values() for method in dataset.methods()},
        "examples": {m.value for m in Method if (ROOT / "examples" / f"{m.value}-demo.yaml").is_file()},
        "python -m backend --help": {m.value for m in Method if re.search(rf"\b{m.value}\b", help_text())},
        "the compare view's metrics": {
            m.value for m, row in table().items() if set(row.monitored) <= set(compare_metrics())
        },
    }


def test_every_registry_keyed_by_method_covers_every_method():
    """A new method is a new row of the table: whatever else is keyed by method either reads the table or is held to
    it here, so a method left out of one fails by name."""
    every = {m.value for m in Method}
    missing = {name: sorted(every - covered) for name, covered in method_registries().items() if covered != every}
    assert missing == {}
