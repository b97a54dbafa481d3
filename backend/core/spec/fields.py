"""The spec's field help, written once on the fields: for the UI's ``info=`` and the documentation's tables."""

from __future__ import annotations

from enum import Enum
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from backend.core.spec.job import JobSpec
from backend.core.spec.methods import RewardSpec
from backend.core.spec.parts import EvaluateSpec


def field_docs(model: type[BaseModel] = JobSpec, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted field, default, help) for every leaf field: the single source for docs/spec.md and UI help."""
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
    """Markdown tables of every spec field, every reward setting and the eval-only part: type, default and help.

    docs/spec.md is this text (scripts/build_spec_docs.py writes it; a test holds it current).
    """

    def table(model: type[BaseModel]) -> list[str]:
        rows = [f"| `{p}` | {_type_text(model, p)} | `{d}` | {h} |" for p, d, h in field_docs(model)]
        return ["| field | type | default | meaning |", "| --- | --- | --- | --- |", *rows]

    lines = table(JobSpec)
    lines += ["", "Each entry of `rollout.rewards`:", "", *table(RewardSpec)]
    lines += ["", "The `evaluate` part (an eval-only job):", "", *table(EvaluateSpec)]
    return "\n".join(lines)


def _type_text(model: type[BaseModel], path: str) -> str:
    # The dotted path's field, then its type as a spec writer reads it: choices spelled out, bounds after a comma.
    *parts, name = path.split(".")
    for part in parts:
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    info = model.model_fields[name]
    bounds = [
        f"{word} {getattr(rule, attr)}"
        for rule in info.metadata
        for attr, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "length >="))
        + (("max_length", "length <="),)
        if getattr(rule, attr, None) is not None
    ]
    return ", ".join([_annotation_text(info.annotation), *bounds])


def _annotation_text(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " or ".join(str(member.value) for member in annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(str(value) for value in args)
    if origin in (Union, UnionType):
        return " or ".join(_annotation_text(arg) for arg in args)
    if origin is list:
        return f"list of {_annotation_text(args[0])}"
    if origin is dict:
        return f"mapping of {_annotation_text(args[0])} to {_annotation_text(args[1])}"
    return "any" if annotation is Any else getattr(annotation, "__name__", str(annotation))
