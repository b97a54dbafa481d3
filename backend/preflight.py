"""Checks run at submit time, before anything is queued: the model can be found and the data fits the method."""

from __future__ import annotations

from pathlib import Path

from backend.data import load_training_dataset
from backend.demo_model import DEMO_MODEL_ID
from backend.spec import JobSpec, Method, ModelSpec, SpecError, hub_offline

# Methods whose trainer this version can build; the others are refused at submit rather than failing later.
AVAILABLE_METHODS = {Method.sft}


def check_model(model: ModelSpec) -> None:
    name = model.name_or_path
    if name == DEMO_MODEL_ID:
        return
    path = Path(name).expanduser()
    looks_local = name.startswith((".", "/", "~")) or path.exists() or name.count("/") > 1
    if looks_local:
        if not path.is_dir():
            raise SpecError([f"model.name_or_path: folder {name} does not exist"])
        if not (path / "config.json").is_file():
            raise SpecError([f"model.name_or_path: {name} has no config.json; is it a saved transformers model?"])
        return
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(name, revision=model.revision, trust_remote_code=model.trust_remote_code)
    except Exception as exc:  # transformers raises OSError/ValueError/HTTP errors for the same "not found"
        where = "in the local cache (the Hub is offline)" if hub_offline() else "on the Hub"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError([f"model.name_or_path: {name!r} was not found {where}; check the id ({first})"]) from None


def check_spec(spec: JobSpec) -> None:
    """Raise SpecError with every problem found; return quietly when the job can be queued."""
    if spec.method not in AVAILABLE_METHODS:
        raise SpecError([f"method: {spec.method.value} is not available in this version yet; use sft"])
    problems: list[str] = []
    for check in (lambda: check_model(spec.model), lambda: load_training_dataset(spec.dataset, spec.method)):
        try:
            check()
        except SpecError as exc:
            problems.extend(exc.problems)
    if problems:
        raise SpecError(problems)
