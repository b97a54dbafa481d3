"""The table of training methods: what each method is, in one row, read by every module that needs to know.

Each method module (``sft``, ``dpo``, ``grpo``, ...) ends with its ``SUPPORT`` row (its types are in
``backend/methods/support.py``); this module collects them.
A row names the method's spec part, the dataset layouts it accepts, the TRL config kwargs (one function, used by the
trainer and by the TRL CLI export alike), its trainer builder, whether it needs a reference model, its before/after
evaluation and the metric its learning verdict reads, its preview rendering, its plots and model-card rows. The
Train form needs no row of its own: a field's spec part says which methods it is for (``rollout`` for every online
method, a method's own part for that method). A table, not a framework: the rows hold plain functions, and the
modules that read them stay in charge of their own work.
"""

from __future__ import annotations

from backend.core.spec import JobSpec, Method
from backend.methods import distillation, dpo, grpo, kto, reward, rloo, sft
from backend.methods.rewards.registry import required_columns
from backend.methods.support import DataFormat, MethodSupport, TrainerInputs, always, spec_value

__all__ = ["DataFormat", "MethodSupport", "TrainerInputs", "always", "spec_value", "support", "table"]

# The modules whose SUPPORT rows make the table, in the order the UI lists the methods.
METHOD_MODULES = (sft, dpo, grpo, kto, rloo, reward, distillation)
_TABLE: dict[Method, MethodSupport] = {module.SUPPORT.method: module.SUPPORT for module in METHOD_MODULES}


def table() -> dict[Method, MethodSupport]:
    """Every method's row, keyed by Method, in the order the UI lists the methods."""
    return _TABLE


def support(method: Method | str) -> MethodSupport:
    """The row of one method (a Method or its value)."""
    return table()[Method(method)]


def plots_for(method: Method | str) -> tuple[tuple[str, str], ...]:
    """(logged metric, label) pairs the method's training curves draw."""
    return support(method).plots


def method_parts() -> dict[str, Method]:
    """Spec part -> method, for code that groups settings by method (``dpo`` -> Method.dpo)."""
    return {row.spec_part: method for method, row in table().items()}


def reward_columns(spec: JobSpec) -> set[str]:
    """Dataset columns a job's rewards read (none unless its method generates completions to reward: GRPO)."""
    if support(spec.method).generation is None:
        return set()
    return set().union(*(required_columns(r) for r in spec.rollout.rewards))
