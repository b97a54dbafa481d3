"""The tool-use warm-up before a GRPO environment job: play the environment to write SFT demonstrations and keep them
as the user's upload; the staged pair (SFT on them, then the GRPO job from that adapter) is queued by the facade."""

from __future__ import annotations

import importlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from backend.core.paths import safe_name
from backend.core.spec import JobSpec, Method
from backend.data.loading import load_training_dataset
from backend.data.uploads import keep_upload
from backend.environments.runtime import builtin_of, open_environment
from backend.environments.warmup import demonstrate


@dataclass(frozen=True)
class Demonstrations:
    """What playing the environment wrote: its summary, the upload id it is kept as, and how many rows."""

    summary: str
    upload_id: str
    rows: int


def write_demonstrations(spec: JobSpec, uploads_dir: Path, rows: int) -> Demonstrations:
    """Play ``spec``'s environment on the first ``rows`` prompts of its dataset (each tool, schema-valid arguments, a
    built-in environment's own solution first, the environment's real answers) and keep the demonstrations in
    ``uploads_dir`` as an SFT upload: the rewarded ones, where the environment rewarded any."""
    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True, uploads_dir=uploads_dir)
    prompts = [dataset[i] for i in range(min(len(dataset), rows))]
    builtin = builtin_of(spec.environment)
    # A built-in server's module may say which call a row rewards (``solve(row)``): its demonstrations are then right.
    solve = getattr(importlib.import_module(builtin.module), "solve", None) if builtin else None
    with open_environment(spec, sessions=1) as active:
        episode_env = active.factory()
        try:
            shown = demonstrate(episode_env, prompts, count=rows, seed=spec.training.seed, solve=solve)
        finally:
            episode_env._close()
    with tempfile.TemporaryDirectory(prefix="studio-warmup-") as tmp:
        path = Path(tmp) / f"warmup-{safe_name(spec.environment.name or 'env')[:40]}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in shown.rows))
        upload_id, _ = keep_upload(path, path.name, Method.sft, uploads_dir)
    return Demonstrations(shown.summary(), upload_id, len(shown.rows))


def after(spec: JobSpec, parent_job_id: str) -> JobSpec:
    """``spec`` continuing from the job ``parent_job_id`` (it waits for it in the queue)."""
    return spec.model_copy(update={"model": spec.model.model_copy(update={"parent_job_id": parent_job_id})})
