"""The spec's field help, written once on the fields: for the UI's ``info=`` and the documentation's tables."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel

from backend.core.spec.job import JobSpec
from backend.core.spec.methods import RewardSpec


def field_docs(model: type[BaseModel] = JobSpec, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted field, default, help) for every leaf field: the single source for README and UI help."""
    rows: list[tuple[str, str, str]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.extend(field_docs(annotation, f"{prefix}{name}."))
            continue
        if info.default_factory is not None:
            default = {
                "name_or_path": "(offline: builtin:tiny-qwen3, else Qwen/Qwen2.5-0.5B-Instruct)",
                "rewards": "[{name: accuracy}]",
            }.get(name, "[]" if "list" in str(annotation) else "{}")
        elif info.is_required():
            default = "required"
        else:
            default = info.default.value if isinstance(info.default, Enum) else info.default
            default = "null" if default is None else str(default)
        rows.append((f"{prefix}{name}", default, info.description or ""))
    return rows


def field_help(path: str) -> str:
    """Help text for one dotted field, for the UI's ``info=``."""
    return {p: h for p, _, h in field_docs()}[path]


def spec_fields_markdown() -> str:
    """Markdown tables of every spec field and every reward setting, with default and help."""
    lines = ["| field | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{p}` | `{d}` | {h} |" for p, d, h in field_docs()]
    lines += ["", "Each entry of `rollout.rewards`:", "", "| field | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{p}` | `{d}` | {h} |" for p, d, h in field_docs(RewardSpec)]
    return "\n".join(lines)
