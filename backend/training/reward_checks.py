"""Reward models a spec names, checked without loading any of them into the app.

Before anything is downloaded, each Hub id among ``rollout.rewards`` is looked up in the Hub's metadata: a missing
id, a Hub that cannot be reached and weights larger than the job's machine can hold are each one sentence naming
the entry (:func:`reward_model_hub_problems`). What needs the models themselves (pre-flight's look at whether a reward
model scores a group of completions alike, the reward bench's scores) runs in a fresh interpreter, ``python -m
backend.training.reward_checks``, with limits on its memory and time, on the CPU and at a lower priority, the way the
upload checks run: only JSON crosses (the request on stdin, one answer on stdout), and a child that dies, runs out of
memory or of time is a sentence, never the app's trouble.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from backend.core.hub_names import BUILTIN_MODELS, hub_offline, is_local_path
from backend.core.spec import JobSpec, ModelSpec, SpecError, online_methods, quote_input
from backend.jobs.records import is_job_id
from backend.platform.child_env import child_environment, run_json_child
from backend.platform.hub_models import HubUnanswered, ModelNotOnHub, weights_bytes
from backend.platform.hub_status import HUB_UNREACHABLE, hub_reachable
from backend.platform.limits import int_setting
from backend.platform.resource_errors import looks_like_oom
from backend.training.memory import format_bytes
from backend.training.reward_models import RewardModelSource

# What one check may add to its interpreter (torch and transformers imported), and how long it may take, the
# models' download included. Settings, read per check.
DEFAULT_CHECK_MEMORY_MB = 3072
DEFAULT_CHECK_SECONDS = 180
CHECK_THREADS = 2  # torch threads: a check shares the machine's cores with the app and the jobs
# A model loaded for a check holds its weights about twice while it loads (the file mapped, the tensors made).
LOAD_FACTOR = 2
ANSWERS = ("ok", "refused", "skipped", "failed")


# What a check's interpreter holds before it loads anything (torch and transformers imported).
CHECK_INTERPRETER_BYTES = 768 * 2**20


def check_memory_bytes() -> int:
    """The address space one check may add to its interpreter (``STUDIO_MODEL_CHECK_MEMORY_MB``)."""
    return int_setting("STUDIO_MODEL_CHECK_MEMORY_MB", DEFAULT_CHECK_MEMORY_MB, low=256) * 2**20


def check_seconds() -> int:
    """How long one check may take, downloads included (``STUDIO_MODEL_CHECK_SECONDS``)."""
    return int_setting("STUDIO_MODEL_CHECK_SECONDS", DEFAULT_CHECK_SECONDS, low=10)


# --- before anything is downloaded: the Hub's metadata ------------------------------------------------------------


def hub_reward_models(rewards) -> list[tuple[int, str]]:
    """(index, name) of each Hub id among ``rewards``, at the first entry naming it (a job id, a built-in model and a
    local folder are no Hub lookup)."""
    named: dict[str, int] = {}
    for index, reward in enumerate(rewards):
        name = reward.model
        if (
            name
            and name not in named
            and not is_job_id(name)
            and name not in BUILTIN_MODELS
            and not is_local_path(name)
        ):
            named[name] = index
    return [(index, name) for name, index in named.items()]


def machine_memory_budget(processes: int = 1) -> int | None:
    """What a job of ``processes`` may plan to hold on this machine (``memory.memory_budget``: its GPU, or its share
    of the RAM); None when not known."""
    from backend.platform.hardware import detect_device
    from backend.training.memory import memory_budget, read_total_ram

    return memory_budget(detect_device(), read_total_ram(), processes)


def job_memory_budget(spec: JobSpec) -> int | None:
    """:func:`machine_memory_budget` of the job's processes."""
    return machine_memory_budget(spec.training.num_processes)


def reward_model_hub_problems(
    rewards, token: str | bool | None = None, budget: int | None = None, field: str = "rollout.rewards"
) -> list[str]:
    """One sentence per Hub reward model in ``rewards`` that the job could not load, read from the Hub's metadata
    (nothing downloaded): not on the Hub (or not readable with ``token``), the Hub not reachable (and the model not
    in the local cache), no weights, or weights over ``budget`` bytes (alone, or all of them together)."""
    named = hub_reward_models(rewards)
    if not named:
        return []
    if not hub_reachable():
        from huggingface_hub import try_to_load_from_cache

        why = HUB_UNREACHABLE + (" (HF_HUB_OFFLINE is set)" if hub_offline() else "")
        return [
            f"{field}[{index}].model: {quote_input(name)} is not in the local cache and {why}; try again once the "
            "Hub can be reached, or use one of your finished reward jobs (its id)"
            for index, name in named
            if not isinstance(try_to_load_from_cache(name, "config.json"), str)
        ]
    problems, sizes = [], {}
    for index, name in named:
        where = f"{field}[{index}].model: {quote_input(name)}"
        try:
            size = weights_bytes(name, token=token)
        except ModelNotOnHub:
            problems.append(
                f"{where} could not be found on the Hub; check the id (a private or gated model needs a sign-in "
                "with access to it)"
            )
            continue
        except HubUnanswered as exc:
            problems.append(f"{where}: the Hub could not be asked about it ({exc}); try again in a moment")
            continue
        if size is None:
            problems.append(
                f"{where} has no model weights on the Hub (no .safetensors or .bin files); give the id of a "
                "sequence-classification model"
            )
        elif budget is not None and size > budget:
            problems.append(
                f"{where} has {format_bytes(size)} of weights, more than the {format_bytes(budget)} a job may use "
                "on this machine; pick a smaller reward model"
            )
        else:
            sizes[name] = size
    if not problems and budget is not None and sum(sizes.values()) > budget:
        problems.append(
            f"{field}: the reward models' weights come to {format_bytes(sum(sizes.values()))} together, more than "
            f"the {format_bytes(budget)} a job may use on this machine; name fewer or smaller ones"
        )
    return problems


# --- what needs the models: in a child ----------------------------------------------------------------------------


def _source_json(source: RewardModelSource) -> dict[str, Any]:
    adapter = str(source.adapter) if source.adapter is not None else None
    return {"model": source.model.model_dump(mode="json"), "adapter": adapter, "max_length": source.max_length}


def _source_of(data: dict[str, Any]) -> RewardModelSource:
    adapter = Path(data["adapter"]) if data["adapter"] else None
    return RewardModelSource(ModelSpec.model_validate(data["model"]), adapter, data["max_length"])


def _child_env(token: str | bool | None) -> dict[str, str]:
    """The child's environment: the allow-list, on the CPU, quiet, and the Hub token the caller's own (a user's, or
    none; a trusted caller's is this machine's)."""
    extra = {
        "CUDA_VISIBLE_DEVICES": "",  # the GPU is the jobs'; and CUDA reserves more address space than the limit
        "MALLOC_ARENA_MAX": "2",  # each thread's malloc arena reserves address space the limit would count
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    if isinstance(token, str) and token:
        extra["HF_TOKEN"] = token
    elif token is None and os.environ.get("HF_TOKEN"):
        extra["HF_TOKEN"] = os.environ["HF_TOKEN"]
    else:
        extra["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    return child_environment(extra)


def in_child(request: dict[str, Any], token: str | bool | None = None) -> tuple[str, Any]:
    """Run one check in a child: ("ok", its answer), ("refused", sentences), or ("gave_up", why: a few words on
    why it could not be done: time, memory, a crash, the models too large for it, an error of its own)."""
    memory, seconds = check_memory_bytes(), check_seconds()
    request = {**request, "memory": memory, "cpu": seconds * CHECK_THREADS + 5, "threads": CHECK_THREADS}
    try:
        done = run_json_child("backend.training.reward_checks", request, ANSWERS, seconds, _child_env(token))
    except subprocess.TimeoutExpired:  # run() killed it
        return "gave_up", f"it took more than {seconds} s"
    except OSError as exc:  # no process could start: the app's trouble, said so
        return "gave_up", f"it could not be started just now ({exc.strerror or exc})"
    kind, value = done.kind, done.value
    if kind in ("ok", "refused"):
        return kind, value
    if kind == "skipped":
        return "gave_up", value
    out_of_memory = f"it needs more than {memory // 2**20} MB of memory"
    if kind == "failed":
        return "gave_up", out_of_memory if _out_of_memory(value) else value
    if _out_of_memory(done.stderr) or done.returncode == -signal.SIGKILL:
        return "gave_up", out_of_memory
    if done.returncode == -signal.SIGXCPU:
        return "gave_up", f"it took more than {request['cpu']} s of CPU"
    return "gave_up", f"it stopped ({done.how_it_stopped()})"


def _out_of_memory(text: str) -> bool:
    """Whether an error says the check's address space ran out (the allocator's, Python's or the loader's words).

    >>> _out_of_memory("ImportError: x.so: failed to map segment from shared object"), _out_of_memory("KeyError: x")
    (True, False)
    """
    return looks_like_oom(text) or "MemoryError" in text or "failed to map segment" in text


def flat_group_warnings(
    spec: JobSpec,
    sources: dict[str, RewardModelSource],
    models_dir: Path,
    uploads_dir: Path | None,
    token: str | bool | None = None,
) -> list[str]:
    """``reward_models.reward_model_warnings`` in a child: its warnings, SpecError when a reward model cannot be
    loaded at all, and one warning when the check could not be done (the job can run without it)."""
    if not sources or spec.method not in online_methods():
        return []
    request = {
        "kind": "flat",
        "spec": json.loads(spec.to_json()),
        "sources": {name: _source_json(source) for name, source in sources.items()},
        "models_dir": str(models_dir),
        "uploads_dir": str(uploads_dir) if uploads_dir is not None else None,
    }
    kind, value = in_child(request, token)
    if kind == "ok":
        return list(value)
    if kind == "refused":
        raise SpecError(list(value))
    return [
        f"rollout.rewards: pre-flight could not check whether the reward models score a group of completions "
        f"differently ({value}); the job can run without that check, and its reward curves will tell"
    ]


def bench_scores(
    specs: list, completions: list, row: dict | None, sources: dict, models_dir: Path, token: str | bool | None = None
) -> list[dict[str, Any]]:
    """``rewards.bench.score_completions`` in a child (its reward models are loaded there): its scores, or
    SpecError with a sentence when it could not score."""
    request = {
        "kind": "bench",
        "specs": [spec.model_dump(mode="json") for spec in specs],
        "completions": list(completions),
        "row": row,
        "sources": {name: _source_json(source) for name, source in sources.items()},
        "models_dir": str(models_dir),
    }
    kind, value = in_child(request, token)
    if kind == "ok":
        return list(value)
    if kind == "refused":
        raise SpecError(list(value))
    raise SpecError([f"reward bench: the reward models could not score these completions ({value}); try again"])


# --- the child ----------------------------------------------------------------------------------------------------


def _too_large(request: dict[str, Any]) -> str | None:
    """Why the check would not fit in its memory, from the Hub's metadata of the models it would load (the policy,
    then the reward models together), before anything is downloaded; None when it fits or is not known."""
    names = [source["model"]["name_or_path"] for source in request["sources"].values()]
    if request["kind"] == "flat":
        names.append(request["spec"]["model"]["name_or_path"])
    sizes = {}
    for name in {n for n in names if n not in BUILTIN_MODELS and not is_local_path(n)}:
        try:
            sizes[name] = weights_bytes(name) or 0
        except (ModelNotOnHub, HubUnanswered):  # the load will say so itself
            continue
    policy = sizes.pop(request["spec"]["model"]["name_or_path"], 0) if request["kind"] == "flat" else 0
    need = LOAD_FACTOR * max(policy, sum(sizes.values()))
    if need > request["memory"]:
        return (
            f"the models need about {format_bytes(need)} to load, more than the {format_bytes(request['memory'])} "
            "this check may use (STUDIO_MODEL_CHECK_MEMORY_MB)"
        )
    return None


def _work(request: dict[str, Any]) -> tuple[str, Any]:
    """The check the request asks for, in this (limited) process."""
    too_large = _too_large(request) if hub_reachable() else None
    if too_large:
        return "skipped", too_large
    sources = {name: _source_of(data) for name, data in request["sources"].items()}
    models_dir = Path(request["models_dir"])
    if request["kind"] == "bench":
        from backend.core.spec import RewardSpec
        from backend.methods.rewards.bench import score_completions

        specs = [RewardSpec.model_validate(spec) for spec in request["specs"]]
        return "ok", score_completions(specs, request["completions"], request["row"], sources, models_dir)
    from backend.training.reward_models import reward_model_warnings

    uploads = Path(request["uploads_dir"]) if request["uploads_dir"] else None
    with tempfile.TemporaryDirectory(prefix="studio-reward-check-") as cache_dir:  # no Arrow copy left behind
        warnings = reward_model_warnings(
            JobSpec.model_validate(request["spec"]), sources, models_dir, uploads, Path(cache_dir)
        )
    return "ok", warnings


def _child() -> None:
    """``python -m backend.training.reward_checks``: one check with limits on itself (set once torch and
    transformers are imported, so they count only what the check adds), its answer as one JSON line on stdout."""
    import resource

    request = json.loads(sys.stdin.read())
    os.nice(10)  # the app's requests and the jobs come first
    # Imported before the limit, which then counts only what the check adds. datasets too: the rows' reader loads
    # parts of numpy that transformers' scikit-learn import loaded first before backend/platform/lean_imports.py.
    import datasets  # noqa: F401
    import safetensors  # noqa: F401
    import tokenizers  # noqa: F401
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer  # noqa: F401

    torch.set_num_threads(request["threads"])
    with open("/proc/self/statm") as fh:
        start = int(fh.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (start + request["memory"], start + request["memory"]))
    resource.setrlimit(resource.RLIMIT_CPU, (request["cpu"], request["cpu"] + 5))
    try:
        answer = _work(request)
    except SpecError as exc:
        answer = ("refused", exc.problems)
    except Exception as exc:  # noqa: BLE001 - whatever the load or the scoring raised is the answer
        from backend.training.reward_models import without_paths

        answer = ("failed", without_paths(exc))
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _child()
