"""Reading an environment's JSON schemas the way a model needs them: references resolved, readable names, and
descriptions taken from where Pydantic and FastMCP put them.

Pydantic writes an enum or a nested model as ``{"$ref": "#/$defs/X"}`` with the definition under ``$defs``; a tool
built from the bare property would show the model ``str`` with no allowed values and fail every call on validation.
A class docstring becomes the action's ``description`` whole, ``Attributes:`` section included, while a field
without ``Field(description=...)`` has no description of its own; a FastMCP tool's description is its function's
docstring with an ``Args:`` section.
"""

from __future__ import annotations

import re
import typing
from typing import Any, Literal

_JSON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}
_SECTION = re.compile(
    r"^\s*(Attributes|Args|Arguments|Parameters|Fields|Returns|Raises|Yields|Examples?|Notes?)"
    r"\s*:\s*$",
    re.IGNORECASE,
)
_ENTRY = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_DESCRIBED_SECTIONS = {"attributes", "args", "arguments", "parameters", "fields"}


MAX_SCHEMA_NODES = 20_000


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every local ``$ref`` replaced by its definition (siblings such as ``description`` win) and a
    one-item ``allOf`` unwrapped; a model that refers to itself becomes a plain object at the second visit.

    >>> s = {"properties": {"d": {"$ref": "#/$defs/Dir", "description": "Where."}},
    ...      "$defs": {"Dir": {"enum": ["up", "down"], "type": "string", "title": "Dir"}}}
    >>> inline_refs(s)["properties"]["d"]
    {'enum': ['up', 'down'], 'type': 'string', 'title': 'Dir', 'description': 'Where.'}
    """
    definitions = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
    visits = [0]

    def walk(node: Any, seen: frozenset[str]) -> Any:
        visits[0] += 1
        if visits[0] > MAX_SCHEMA_NODES:  # references that fan out would inline into an exponential tree
            raise ValueError(f"the schema inlines into more than {MAX_SCHEMA_NODES} parts")
        if isinstance(node, list):
            return [walk(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        node = {k: v for k, v in node.items() if k not in ("$defs", "definitions")}
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
            node.pop("allOf")
            node = {**all_of[0], **node}
        ref = node.pop("$ref", None)
        if isinstance(ref, str):
            key = ref.rsplit("/", 1)[-1]
            if ref.startswith("#/") and key in definitions and key not in seen:
                node = {**walk(definitions[key], seen | {key}), **node}
                seen = seen | {key}
            else:
                node.setdefault("type", "object")
        return {
            k: (walk(v, seen) if k != "properties" else {p: walk(s, seen) for p, s in v.items()})
            if isinstance(v, (dict, list))
            else v
            for k, v in node.items()
        }

    return walk(schema, frozenset())


def snake(name: str) -> str:
    """A class name as a tool name, acronyms kept whole.

    >>> [snake(n) for n in ("Move", "REPL", "TextArena", "HTTPRequest", "Connect4")]
    ['move', 'repl', 'text_arena', 'http_request', 'connect4']
    """
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def split_docstring(text: str) -> tuple[str, dict[str, str]]:
    """The prose of a Google-style docstring (before its first section) and the descriptions its ``Attributes:`` /
    ``Args:`` section gives each name.

    >>> split_docstring("Move a piece.\\n\\nAttributes:\\n    column: Where to drop it,\\n        0 to 6.\\n")
    ('Move a piece.', {'column': 'Where to drop it, 0 to 6.'})
    """
    prose: list[str] = []
    described: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    indent = 0
    for line in (text or "").splitlines():
        heading = _SECTION.match(line)
        if heading:
            section, current = heading.group(1).lower(), None
            continue
        if section is None:
            prose.append(line.rstrip())
            continue
        if section not in _DESCRIBED_SECTIONS or not line.strip():
            continue
        entry = _ENTRY.match(line)
        if entry and (current is None or len(entry.group(1)) <= indent):
            indent, current = len(entry.group(1)), entry.group(2)
            described[current] = entry.group(3).strip()
        elif current is not None:
            described[current] = f"{described[current]} {line.strip()}".strip()
    return "\n".join(prose).strip(), described


def python_type(prop: dict[str, Any]) -> Any:
    """The annotation TRL (through transformers) turns back into this JSON type for the model."""
    if "const" in prop and isinstance(prop["const"], (str, int)):
        return Literal[(prop["const"],)]  # type: ignore[misc]
    if prop.get("enum") and all(isinstance(v, (str, int)) for v in prop["enum"]):
        return Literal[tuple(prop["enum"])]  # type: ignore[misc]
    options = prop.get("anyOf") or prop.get("oneOf")
    if options:
        kinds = [o for o in options if o.get("type") != "null"]
        inner = python_type(kinds[0]) if len(kinds) == 1 else Any
        return typing.Optional[inner] if len(kinds) < len(options) else inner  # noqa: UP045 - a value built at run time
    json_type = prop.get("type")
    if isinstance(json_type, list):
        json_type = next((t for t in json_type if t != "null"), "string")
    if json_type == "array" and isinstance(prop.get("items"), dict) and prop["items"].get("type") in _JSON_TYPES:
        item_type = _JSON_TYPES[prop["items"]["type"]]  # a name: ruff reads a string inside list[...] as an annotation
        return list[item_type]
    return _JSON_TYPES.get(json_type, str)


def argument_text(name: str, prop: dict[str, Any]) -> str:
    """One line of a tool's ``Args:``: the description, the allowed values, an object's fields."""
    text = " ".join(str(prop.get("description") or prop.get("title") or f"The {name}.").split())
    allowed = prop.get("enum") or ([prop["const"]] if "const" in prop else None)
    if allowed:
        text = f"{text.rstrip(' .')}. One of: {', '.join(map(str, allowed))}."
    fields = prop.get("properties")
    if isinstance(fields, dict) and fields:
        required = set(prop.get("required") or ())
        parts = [
            f"{field} ({field_type(sub)}{', required' if field in required else ''})" for field, sub in fields.items()
        ]
        text = f"{text.rstrip(' .')}. An object with: {'; '.join(parts)}."
    return text


def field_type(prop: dict[str, Any]) -> str:
    """A JSON-schema property's type in words for a tool's help: ``string``, ``one of a/b``, ``value``."""
    if prop.get("enum"):
        return "one of " + "/".join(map(str, prop["enum"]))
    json_type = prop.get("type")
    return json_type if isinstance(json_type, str) else "value"
