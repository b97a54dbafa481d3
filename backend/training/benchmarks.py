"""Benchmarks with lm-evaluation-harness on a loaded model, one side at a time: the tuned adapter, a staged job's
parent adapter (start) and the base (adapters off), every side on the same items, per-item scores kept for the paired
interval (backend/core/benchmarks.py builds the report).

lm-eval's HFLM wraps the model already in memory, so no second copy is loaded and the adapter is switched between
sides. Local tasks (the demo models' files, a user's JSONL) are lm-eval task configs built here, their rows read into
memory here from local files, never from the Hub nor into the shared datasets cache; a JSONL of prompts with a
``solution`` column is a generate_until task, greedy, scored by the same checker as GRPO's accuracy reward. lm-eval's
vLLM backend is not used: it would load a second copy of the model beside the trainer's, and no vLLM machine was
available to test it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backend.core.artifacts import BenchmarkReport
from backend.core.benchmarks import (
    BENCHMARK_ASSETS,
    PRESETS,
    build_report,
    task_info,
    task_kind,
    task_score,
)
from backend.core.uploads import upload_display_name
from backend.data.loading import load_file
from backend.data.user_cache import cache_root
from backend.methods.rewards.accuracy_rewards import TRLReward
from backend.models.mixed_batch import BASE_ADAPTER

log = logging.getLogger("studio.benchmarks")

Progress = Callable[[int, int, str], None]
# Greedy answers of the demo tasks are one short line; a user's rows may want more.
ARITH_TOKENS = 32
OWN_ROWS_TOKENS = 256


def _prompt_text(doc: Mapping[str, Any]) -> str:
    """A row's prompt as the user's turn: a chat prompt's last user message (lm-eval renders it in the template)."""
    prompt = doc.get("prompt", doc.get("question", ""))
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1] if users else "")
    return str(prompt)


_CHECKER = TRLReward("accuracy")


def check_answer(doc: Mapping[str, Any], results: list[str]) -> dict[str, float]:
    """lm-eval's ``process_results`` for a row with a ``solution``: GRPO's accuracy checker on the greedy answer (an
    unparseable solution scores 0)."""
    score = _CHECKER([results[0]], solution=[doc.get("solution", "")])[0]
    return {"accuracy": float(score or 0.0)}


Rows = Callable[..., Any]  # lm-eval's ``custom_dataset``: the task's rows, whatever keywords it is called with


def local_rows(path: Path, display: str, cache: Path | None) -> Rows:
    """A local JSONL's rows for lm-eval, read into memory once for every side (``load_file``: datasets' Arrow copy
    made in ``cache``, the owner's datasets cache, and removed, never in the shared cache; a malformed file is a
    sentence at ``benchmarks.tasks`` that names its first bad line)."""
    from datasets import DatasetDict

    rows = DatasetDict({"test": load_file(path, display, cache, field="benchmarks.tasks")})
    return lambda **_: rows


def solution_task(name: str, rows: Rows, max_tokens: int) -> dict[str, Any]:
    """An lm-eval generate_until task over a JSONL of prompts with a ``solution`` column, greedy."""
    return {
        "task": name,
        "dataset_path": "json",  # lm-eval wants one; ``custom_dataset`` gives the rows
        "custom_dataset": rows,
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": _prompt_text,
        "doc_to_target": lambda doc: str(doc.get("solution", "")),
        "generation_kwargs": {"until": [], "do_sample": False, "max_gen_toks": max_tokens},
        "process_results": check_answer,
        "metric_list": [{"metric": "accuracy", "aggregation": "mean", "higher_is_better": True}],
    }


def choice_task(name: str, rows: Rows) -> dict[str, Any]:
    """An lm-eval multiple-choice task over a JSONL of ``question``, ``choices`` and ``label``."""
    return {
        "task": name,
        "dataset_path": "json",
        "custom_dataset": rows,
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{question}}",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "label",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    }


def local_task(name: str, index: int, uploads_dir: Path | None) -> tuple[str, dict[str, Any]]:
    """(lm-eval's name for it, its config) for a built-in task or a user's JSONL (a path or an upload id)."""
    if name in ("studio_choice", "studio_arith"):
        shipped = BENCHMARK_ASSETS / f"{name}.jsonl"
        rows = local_rows(shipped, shipped.name, None)
        return name, choice_task(name, rows) if name == "studio_choice" else solution_task(name, rows, ARITH_TOKENS)
    upload = task_kind(name) == "upload" and uploads_dir is not None
    path = (uploads_dir / name) if upload else Path(name).expanduser()
    cache = cache_root(uploads_dir) if uploads_dir is not None else None
    internal = f"studio_own_rows_{index}"
    return internal, solution_task(
        internal, local_rows(path.resolve(), upload_display_name(name), cache), OWN_ROWS_TOKENS
    )


@contextmanager
def lm_eval_lengths(model) -> Iterator[None]:
    """Let lm-eval's answer lengths hold: it caps a generation by ``max_length``, which a model's own
    ``generation_config.max_new_tokens`` (the demo models ship 64) would override; put back after."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "generation_config", None)
    saved = getattr(config, "max_new_tokens", None)
    if config is not None:
        config.max_new_tokens = None
    try:
        yield
    finally:
        if config is not None:
            config.max_new_tokens = saved


@contextmanager
def on_side(model, adapter: str | None) -> Iterator[None]:
    """The model as one side: ``BASE_ADAPTER`` with adapters off, an adapter name active, None as it is."""
    if adapter == BASE_ADAPTER:
        with model.disable_adapter():
            yield
        return
    if adapter is None:
        yield
        return
    previous = model.active_adapter
    model.set_adapter(adapter)
    try:
        yield
    finally:
        model.set_adapter(previous)


def _item_values(samples: list[dict[str, Any]], metric: str, metric_filter: str) -> dict[int, float]:
    """Per item (lm-eval's doc_id), the metric's value, from ``log_samples`` (one filter's entries)."""
    values = {}
    for sample in samples:
        if sample.get("filter", metric_filter) == metric_filter and metric in sample:
            values[int(sample["doc_id"])] = float(sample[metric])
    return values


# lm_eval's package import sets these in os.environ (for its own downloads). Left set, they change the environment
# of every process this one starts later: the worker pool then refuses to fork a job for an environment that differs
# from its own. Imported here with them restored; this can go when lm-eval stops setting them at import.
_LM_EVAL_IMPORT_ENV = ("HF_XET_HIGH_PERFORMANCE", "HF_HUB_ENABLE_HF_TRANSFER")


def _import_lm_eval() -> None:
    """Import lm_eval, leaving os.environ as it was."""
    saved = {name: os.environ.get(name) for name in _LM_EVAL_IMPORT_ENV}
    try:
        import lm_eval  # noqa: F401
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _NoCustomDatasetNote(logging.Filter):
    """lm-eval tells how to pass keywords to a task's ``custom_dataset`` each time it reads one: no news to a job's
    log, where every local task is read that way (``local_rows``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed" not in record.getMessage()


_QUIET_CUSTOM_DATASET = _NoCustomDatasetNote()


def _evaluate(lm, configs: list[Any], limit: int | None, chat: bool, manager) -> dict[str, Any]:
    from lm_eval import simple_evaluate

    # Fixed seeds and the same limit on every side: each side answers exactly the same items.
    result = simple_evaluate(
        model=lm,
        tasks=configs,
        limit=limit,
        log_samples=True,
        apply_chat_template=chat,
        task_manager=manager,
        bootstrap_iters=100,  # a mean's stderr is closed-form; only other metrics bootstrap (the pairing is ours)
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
        verbosity="WARNING",
    )
    return result or {}


def run_benchmarks(
    model,
    tokenizer,
    tasks: list[str],
    limit: int | None,
    sides: Mapping[str, str | None],
    uploads_dir: Path | None = None,
    batch_size: int = 16,
    progress: Progress | None = None,
    scored: str = "",
    items_file: Path | None = None,
) -> BenchmarkReport:
    """Score ``tasks`` on every side (label -> adapter: ``tuned``, ``start``, ``base``) of the loaded model; with
    ``items_file`` each item's score per task and side is written there as JSON (the report keeps only summaries)."""
    import torch

    _import_lm_eval()
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    started = time.monotonic()
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    logging.getLogger("lm_eval.api.task").addFilter(_QUIET_CUSTOM_DATASET)  # added once, however often called
    local = {name: local_task(name, i, uploads_dir) for i, name in enumerate(tasks) if name not in PRESETS}
    presets = [name for name in tasks if name in PRESETS]
    # Indexing lm-eval's own task folder takes seconds: only when a preset is asked for.
    manager = TaskManager(include_defaults=bool(presets), verbosity="WARNING")
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(model.device))
    per_item: dict[str, dict[str, dict[int, float]]] = {name: {} for name in tasks}
    stderr: dict[str, dict[str, float | None]] = {name: {} for name in tasks}
    total, done = len(sides) * len(tasks), 0
    model.eval()
    for label, adapter in sides.items():
        for name in tasks:
            if progress:
                progress(done, total, f"benchmarks: {name} on {label}")
            info = task_info(name)
            internal, config = local.get(name, (name, name))
            # The presets keep lm-eval's standard prompts; local tasks are chat turns, rendered by the template.
            with on_side(model, adapter), lm_eval_lengths(model), torch.no_grad():
                result = _evaluate(lm, [config], limit or info.default_limit, info.chat, manager)
            row = result.get("results", {}).get(internal, {})
            samples = result.get("samples", {}).get(internal, [])
            per_item[name][label] = _item_values(samples, info.metric, info.metric_filter)
            stderr[name][label] = _number(row.get(f"{info.metric}_stderr,{info.metric_filter}"))
            done += 1
    scores = {name: task_score(task_info(name), name, per_item[name], stderr[name]) for name in tasks}
    if items_file is not None:
        items_file.write_text(json.dumps(per_item, indent=1))
    if progress:
        progress(total, total, "benchmarks: done")
    return build_report(scores, limit, scored, round(time.monotonic() - started, 2))


def _number(value: Any) -> float | None:
    """lm-eval writes "N/A" where it has no stderr."""
    return float(value) if isinstance(value, (int, float)) else None
