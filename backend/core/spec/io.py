"""The spec in and out of text: validated from JSON text or a mapping (``parse_spec``), read from JSON or YAML
(``load_spec_text``) with settings laid over it (``with_settings``: the CLI's ``--set``), with every way it can be
unreadable a SpecError."""

from __future__ import annotations

from typing import Any

from backend.core.spec.errors import SpecError
from backend.core.spec.job import JobSpec


def parse_spec(data: str | dict[str, Any]) -> JobSpec:
    """Validate a spec from JSON text or a dict; raise :class:`SpecError` listing every problem."""
    return JobSpec.from_json(data) if isinstance(data, str) else JobSpec.from_dict(data)


MAX_SPEC_BYTES = 1 << 20


def load_spec_text(text: str | bytes, where: str = "spec") -> dict[str, Any]:
    """A spec mapping from JSON or YAML text (a file, an API call); every way it can be unreadable is a SpecError.

    ``where`` names the source in the sentence (a file path, ``spec``). Size is capped before parsing, and deep
    nesting (a RecursionError in the parsers) is refused like any other malformed input.
    """
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError([f"{where}: {len(text)} bytes is larger than a spec can be ({MAX_SPEC_BYTES} bytes)"])
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError([f"{where}: not UTF-8 text (byte {exc.start}); save it as UTF-8 JSON or YAML"]) from None
    try:
        data = _json_or_yaml(text, where)
    except RecursionError:
        raise SpecError([f"{where}: nested too deeply to be a spec"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{where}: must be a mapping of spec fields (got {type(data).__name__})"])
    return data


def _json_or_yaml(text: str, where: str) -> Any:
    import json

    import yaml

    try:
        return json.loads(text)
    except ValueError as json_error:  # YAML is a superset of JSON in all but a few corners, so JSON goes first
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as yaml_error:
            cause = json_error if text.lstrip().startswith("{") else yaml_error
            raise SpecError([f"{where}: not valid JSON or YAML ({str(cause).splitlines()[0][:120]})"]) from None


def with_settings(spec: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """``spec`` (a mapping, as :func:`load_spec_text` reads it) with each ``PATH=VALUE`` of ``settings`` set; the
    value is read as YAML (3, 0.5, true, a list or a mapping) and kept as text where it reads as anything else.

    >>> with_settings({"distillation": {"teacher": "<id>"}}, ["distillation.teacher=20261205-154336-934a11"])
    {'distillation': {'teacher': '20261205-154336-934a11'}}
    >>> with_settings({}, ["training.max_steps=60", "lora.enabled=false"])
    {'training': {'max_steps': 60}, 'lora': {'enabled': False}}
    >>> with_settings({}, ["rollout.rewards=[{model: 20261205-154336-934a11, weight: 1.0}]"])
    {'rollout': {'rewards': [{'model': '20261205-154336-934a11', 'weight': 1.0}]}}
    """
    import yaml

    for setting in settings:
        path, sep, value = setting.partition("=")
        names = path.strip().split(".")
        if not sep or not all(names):
            raise SpecError([f"--set {setting}: write it as PATH=VALUE, e.g. training.max_steps=100"])
        part = spec
        for name in names[:-1]:
            part = part.setdefault(name, {})
            if not isinstance(part, dict):
                raise SpecError([f"--set {setting}: {name} is a setting, not a part of the spec"])
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        part[names[-1]] = (
            parsed if isinstance(parsed, (bool, int, float, str, list, dict)) else value
        )  # a list of rewards
    return spec
