"""What every part of the spec is built on: the part base class, the default model and the checks that free-form
values share."""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from pydantic import BaseModel, ConfigDict

from backend.core.hub_names import DEMO_MODEL_ID, hub_offline
from backend.core.spec.errors import ECHO_LIMIT, shorten

ONLINE_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# numpy's and torch's seeding accept at most an unsigned 32-bit integer.
MAX_SEED = 2**32 - 1
MAX_FREE_FORM_DEPTH = 64


def free_form_problem(value: Any, max_depth: int = MAX_FREE_FORM_DEPTH) -> str | None:
    """Why free-form JSON-like data (a JSON schema) cannot be stored, or None: NaN or infinity, or too deep."""
    pending: list[tuple[Any, str, int]] = [(value, "", 0)]  # a loop, not recursion: the depth is the user's choice
    while pending:
        item, path, depth = pending.pop()
        if depth > max_depth:
            return f"must not nest deeper than {max_depth} levels"
        if isinstance(item, float) and not math.isfinite(item):
            return f"must hold only finite numbers (got {item!r} at {shorten(path, ECHO_LIMIT)})"
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        pending.extend((child, f"{path}.{key}" if path else str(key), depth + 1) for key, child in children)
    return None


def refuse_control_characters(value: str | None) -> str | None:
    """``value`` as it is, for a field validator; ValueError when it holds a control character or line break."""
    if value is not None and any(unicodedata.category(ch) == "Cc" or ch in "\u2028\u2029" for ch in value):
        raise ValueError("must not contain control characters such as line breaks or tabs")
    return value


def default_model() -> str:
    """The offline demo model without a network, else a small instruct model from the Hub."""
    return DEMO_MODEL_ID if hub_offline() else ONLINE_DEFAULT_MODEL


class SpecPart(BaseModel):
    """A part of the spec: frozen, with unknown keys, NaN and infinity refused."""

    # Unknown keys are refused so a typo in a YAML spec is an error, not a silently ignored setting. NaN and
    # infinity are refused because JSON cannot carry them: stored, they would come back as null and poison the row.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
