"""Walks a job through the house: the backend files its submit and its worker enter, how often each job it names is
read from the store, and how often its dataset is loaded, in each process.

    python benchmarks/walk.py [--specs grpo-reward sft-parent distill-teacher] [--files] [--label TEXT] [--record]

In a temporary data folder it stores the jobs the specs name as succeeded, without training them (a reward job's
score-head adapter, an SFT job's LoRA adapter, each saved as the worker saves it), then walks each spec:

- the submit trip: ``StudioAPI.jobs.submit`` as the jobs' owner, in a fresh interpreter (the facade built first);
- the worker trip: ``backend.worker.run_job`` on the stored job, in another fresh interpreter, up to the start of
  training (the trainer built, stopped where the worker asks for its forecast; nothing is trained).

A trip is traced with ``sys.setprofile`` (and ``threading.setprofile``) restricted to the files under ``backend/``:
a file counts as entered when one of its functions is called (a module's own code run at import is not a room
entered). A job is read each time ``JobStore.get`` is called with its id; the dataset is loaded each time
``backend/data/loading.py``'s ``_load_raw`` runs (every load of the rows passes there; its callers are listed).
A reward model's check runs in a child of its own (``reward_checks``), not traced here: only JSON crosses to it.
``--record`` appends the figures to docs/benchmarks.md (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BACKEND = str(ROOT / "backend") + os.sep
HERE = str(Path(__file__).resolve())
OWNER = "alice"
TRAINING = {"max_steps": 2, "batch_size": 4, "max_length": 128, "learning_rate": 1e-3, "save_steps": 100}


def specs(named: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The specs walked, by name, naming the stored jobs ``named`` (what -> job id)."""
    tiny = {"name_or_path": "builtin:tiny-qwen3"}
    return {
        "grpo-reward": {
            "method": "grpo",
            "model": tiny,
            "dataset": {"source": "builtin", "name": "math-demo"},
            "rollout": {
                "num_generations": 4,
                "max_completion_length": 8,
                "rewards": [{"model": named["reward"], "weight": 1.0}],
            },
            "training": TRAINING,
        },
        "sft-parent": {
            "method": "sft",
            "model": {**tiny, "parent_job_id": named["parent"]},
            "dataset": {"source": "builtin", "name": "chat-demo"},
            "training": TRAINING,
        },
        "distill-teacher": {
            "method": "distillation",
            "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
            "dataset": {"source": "builtin", "name": "math-demo"},
            "distillation": {"teacher": named["teacher"], "max_completion_length": 8},
            "training": TRAINING,
        },
    }


# --- the stored jobs --------------------------------------------------------------------------------------------


def _finished(store, paths, spec: dict, save) -> str:
    """A job of ``spec`` stored as succeeded, its adapter written by ``save(folder)`` where the worker saves it."""
    from backend.core.spec import parse_spec
    from backend.jobs.records import JobStatus

    job = store.add(parse_spec(spec))
    assert store.claim_next().id == job.id
    folder = paths.job_adapter(job.id)
    save(folder)
    assert store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(folder)})
    return job.id


def _lora(paths, model: str, head=None):
    """``save(folder)`` for a LoRA adapter on ``model`` (a language model's, or with ``head`` a score head's), with
    its tokenizer, as a finished job of that model saves them."""

    def save(folder: Path) -> None:
        import torch
        import transformers
        from peft import get_peft_model

        from backend.core.spec import LoraSpec, ModelSpec
        from backend.models.loading import LANGUAGE_MODEL_HEAD, load_tokenizer, resolve_model, to_peft_config

        spec = ModelSpec(name_or_path=model)
        path = resolve_model(spec, paths.models)
        use = head or LANGUAGE_MODEL_HEAD
        torch.manual_seed(0)
        kwargs = {"num_labels": 1} if head is not None else {}
        base = getattr(transformers, use.auto_class).from_pretrained(path, **kwargs)
        get_peft_model(base, to_peft_config(LoraSpec(), use)).save_pretrained(folder)
        load_tokenizer(path, spec).save_pretrained(folder)

    return save


def stored_jobs(data_dir: Path) -> dict[str, str]:
    """The finished jobs the specs name, stored in ``data_dir``: what -> job id."""
    from backend.core.paths import DataPaths
    from backend.jobs.store import JobStore
    from backend.methods.reward import SCORE_HEAD
    from backend.models.demo import ensure_demo_model

    paths = DataPaths(data_dir).ensure()
    ensure_demo_model(paths.models)
    store = JobStore(paths.db)
    tiny, arith = "builtin:tiny-qwen3", "builtin:tiny-qwen3-arith"
    base = {"owner": OWNER, "training": TRAINING}
    chat = {"source": "builtin", "name": "chat-demo"}
    return {
        "reward": _finished(
            store,
            paths,
            {
                **base,
                "method": "reward",
                "model": {"name_or_path": tiny},
                "dataset": {"source": "builtin", "name": "preferences-demo"},
            },
            _lora(paths, tiny, SCORE_HEAD),
        ),
        "parent": _finished(
            store,
            paths,
            {**base, "method": "sft", "model": {"name_or_path": tiny}, "dataset": chat},
            _lora(paths, tiny),
        ),
        "teacher": _finished(
            store,
            paths,
            {**base, "method": "sft", "model": {"name_or_path": arith}, "dataset": chat},
            _lora(paths, arith),
        ),
    }


# --- the trace --------------------------------------------------------------------------------------------------


class Walk:
    """A profile function that notes the backend files entered, the store's reads of the named jobs and the loads
    of the dataset."""

    def __init__(self, named: list[str]) -> None:
        self.files: set[str] = set()
        self.reads: dict[str, int] = dict.fromkeys(named, 0)
        self.loads: collections.Counter[str] = collections.Counter()
        self.load_callers: collections.Counter[str] = collections.Counter()

    def __call__(self, frame, event, arg) -> None:
        if event != "call":
            return
        code = frame.f_code
        path = code.co_filename
        if not path.startswith(BACKEND) or code.co_name == "<module>" or importing(frame):
            return
        where = os.path.relpath(path, ROOT)
        self.files.add(where)
        if where == os.path.join("backend", "jobs", "store.py") and code.co_name == "get":
            job_id = frame.f_locals.get("job_id")
            if job_id in self.reads:
                self.reads[job_id] += 1
        elif where == os.path.join("backend", "data", "loading.py") and code.co_name in ("_load_raw",):
            self.loads[code.co_name] += 1
            caller = caller_outside(frame, where)
            self.load_callers[caller] += 1

    @contextlib.contextmanager
    def tracing(self):
        threading.setprofile(self)
        sys.setprofile(self)
        try:
            yield self
        finally:
            self.stop()

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def result(self, **extra) -> dict[str, Any]:
        return {
            "files": sorted(self.files),
            "reads": self.reads,
            "loads": sum(self.loads.values()),
            "load_callers": dict(self.load_callers),
            **extra,
        }


def importing(frame) -> bool:
    """Whether the call runs as part of a module's import (its code at module level, below this script)."""
    frame = frame.f_back
    while frame is not None and frame.f_code.co_filename != HERE:
        if frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


def caller_outside(frame, where: str) -> str:
    """The first function up the stack outside ``where``, as file:function."""
    frame = frame.f_back
    while frame is not None:
        path = os.path.relpath(frame.f_code.co_filename, ROOT)
        if path != where:
            return f"{path}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


# --- the trips, each in a fresh interpreter ----------------------------------------------------------------------


def submit_trip(data_dir: Path, spec: dict, named: list[str]) -> dict[str, Any]:
    """Submit ``spec`` as its owner and trace the submit."""
    from backend.api import StudioAPI
    from backend.core.users import User

    api = StudioAPI(data_dir, scheduler="none")
    walk = Walk(named)
    started = time.monotonic()
    try:
        with walk.tracing():
            submitted = api.jobs.submit(spec, user=User(OWNER))
    finally:
        api.close()
    return walk.result(job_id=submitted.job.id, seconds=round(time.monotonic() - started, 1))


class TrainerReady(BaseException):
    """Raised where the worker asks for the forecast, the trainer built: the walk ends there, before training."""


def worker_trip(data_dir: Path, job_id: str, named: list[str]) -> dict[str, Any]:
    """Run the stored, claimed job's worker up to the start of training and trace it."""
    import backend.training.forecast as forecast
    from backend.core.paths import DataPaths
    from backend.worker import run_job

    walk = Walk(named)
    reached = []

    def stop_here(*_args, **_kwargs):
        walk.stop()
        reached.append(True)
        raise TrainerReady

    forecast.forecast_first = stop_here  # the worker imports it where it asks, after building the trainer
    said = io.StringIO()
    started = time.monotonic()
    with walk.tracing(), contextlib.redirect_stderr(said):
        run_job(job_id, DataPaths(data_dir), threading.Event())  # records the job failed: the walk stopped it
    if not reached:
        raise SystemExit(f"the worker stopped before its trainer was built:\n{said.getvalue()[-4000:]}")
    return walk.result(seconds=round(time.monotonic() - started, 1))


def in_child(*args: str) -> dict[str, Any]:
    """This script run with ``args`` in a fresh interpreter: the JSON line it prints last."""
    done = subprocess.run([sys.executable, HERE, *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def walk_spec(data_dir: Path, name: str, spec: dict, named: dict[str, str]) -> dict[str, Any]:
    """Both trips of one spec: submit, claim, worker."""
    from backend.core.paths import DataPaths
    from backend.jobs.store import JobStore

    ids = json.dumps(named)
    submit = in_child("--trip", "submit", "--data-dir", str(data_dir), "--spec-json", json.dumps(spec), "--named", ids)
    claimed = JobStore(DataPaths(data_dir).db).claim_next()
    assert claimed is not None and claimed.id == submit["job_id"], claimed
    worker = in_child("--trip", "worker", "--data-dir", str(data_dir), "--job-id", claimed.id, "--named", ids)
    return {"spec": name, "submit": submit, "worker": worker}


def describe(name: str, trip: str, figures: dict[str, Any], named: dict[str, str], label: str) -> tuple[str, str]:
    """(what, figure) of one trip, for report()."""
    which = {job_id: what for what, job_id in named.items()}
    reads = [f"{which[job_id]} job read {n}x" for job_id, n in figures["reads"].items() if n]
    callers = ", ".join(f"{caller} {n}" for caller, n in figures["load_callers"].items())
    figure = f"{len(figures['files'])} backend files; " + "; ".join(
        [*reads, f"dataset loaded {figures['loads']}x" + (f" ({callers})" if callers else "")]
    )
    return f"walk{f' ({label})' if label else ''}, {name}: the {trip} trip ({figures['seconds']} s)", figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", nargs="+", default=["grpo-reward", "sft-parent", "distill-teacher"])
    parser.add_argument("--files", action="store_true", help="list the backend files each trip enters")
    parser.add_argument("--label", default="", help="a word on the code walked, in each row (a commit, before/after)")
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    parser.add_argument("--trip", choices=["submit", "worker"], help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--spec-json", help=argparse.SUPPRESS)
    parser.add_argument("--job-id", help=argparse.SUPPRESS)
    parser.add_argument("--named", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trip is not None:  # a child: one trip, its figures as the last line
        named = list(json.loads(args.named).values())
        if args.trip == "submit":
            figures = submit_trip(args.data_dir, json.loads(args.spec_json), named)
        else:
            figures = worker_trip(args.data_dir, args.job_id, named)
        print(json.dumps(figures))
        return 0
    from record import report

    rows, walks = [], []
    with tempfile.TemporaryDirectory(prefix="studio-walk-") as folder:
        data_dir = Path(folder) / "data"
        named = stored_jobs(data_dir)
        every = specs(named)
        for name in args.specs:
            walked = walk_spec(data_dir, name, {**every[name], "owner": OWNER}, named)
            walks.append(walked)
            rows += [describe(name, trip, walked[trip], named, args.label) for trip in ("submit", "worker")]
    if args.files:
        for walked in walks:
            for trip in ("submit", "worker"):
                print(f"{walked['spec']}, {trip}: " + " ".join(walked[trip]["files"]))
    report(rows, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
