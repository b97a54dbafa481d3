"""The backend facade: the one door of the UI and the CLI (``StudioAPI``: ``api.jobs.submit``, ``api.chat.chat_pair``
...), and the whole vocabulary of the UI and the CLI (types, enums, errors, catalogue), re-exported so ``components/``
and ``backend/cli/`` import nothing else.

``StudioAPI`` (``studio``) is composed of parts by concern over one core (``core``): ``jobs``, ``datasets``,
``environments``, ``chat``, ``arena``, ``hub``, ``benchmarks``, ``export``. Each exported name is written once, in
the tables below; ``__all__`` is derived from them (tests/unit/api/test_facade.py)."""

from __future__ import annotations

import importlib
from typing import Any

# module -> the names it gives the facade ("name=attribute" where the facade's name differs), imported at once.
_EAGER = {
    "backend.api.studio": "StudioAPI",
    "backend.api.common": "Submitted WarmUp MetricsPage",
    "backend.api.benchmarks": "benchmark_choices",
    "backend.api.guards": "GuardReading",
    "backend.api.catalogue": "CURATED_MODELS HF_JOB_FLAVORS DEFAULT_HF_JOB_FLAVOR REWARDS SpecField spec_field methods "
    "method_part field_methods generates environment_choices builtin_dataset_choices builtin_dataset_help Monitoring "
    "monitoring",
    "backend.chat.feedback_log": "message_text",
    "backend.core.artifacts": "LearningVerdict SignalWatch BenchmarkReport JobArtifacts",
    "backend.core.benchmarks": "benchmark_compare_rows=compare_rows",
    "backend.core.forecasts": "FORECAST_NO_SIGNAL=NO_SIGNAL",
    "backend.core.learning": "verdict_metric_line status_text drift_text",
    "backend.core.run_warnings": "judge_warnings",
    "backend.core.spec": "JobSpec Method RewardSpec SpecError load_spec_text with_settings GGUF_TYPES EXPORT_FORMATS",
    "backend.core.users": "User hub_user local_user",
    "backend.core.wording": "progress_text EVALUATING counted",
    "backend.data.upload_store": "StoredUpload UploadShelf",
    "backend.environments.connection": "EnvironmentUnavailable",
    "backend.environments.launcher": "EnvironmentStartError",
    "backend.jobs.scheduler": "SchedulerHealth",
    "backend.jobs.records": "JobRecord JobStatus",
    "backend.jobs.store_errors": "JobNotFound InvalidTransition StoreError ExportBusy",
    "backend.jobs.sweep_search": "SEARCHES",
    "backend.jobs.sweeps": "SweepReport OBJECTIVES_HELP",
    "backend.models.demo": "DEMO_MODEL_ID DEMO_MODEL_NOTE is_demo_model ARITH_MODEL_ID demo_model_note demo_recipe",
    "backend.platform.hardware": "detect_device",
    "backend.platform.hub_status": "hub_status",
    "backend.platform.space_runtime": "on_space on_zero_gpu gpu_task ZERO_GPU_REFUSAL",
    "backend.platform.storage": "StorageError",
}

# Imported on first use (PEP 562): these modules load torch, transformers, datasets or huggingface_hub, which the
# CLI and the scheduler should not pay for at start-up.
_LAZY = {
    "backend.chat.side_by_side": "CHAT_MODES",
    "backend.chat.tool_calls": "ChatAnswer ToolCall",
    "backend.data.uploads": "UnmappedUpload",
    "backend.hub.hf_jobs": "RemoteJobError",
    "backend.hub.publish": "PushError",
    "backend.hub.snippets": "snippets_markdown",
    "backend.models.mixed_batch": "GenerationSettings",
    "backend.training.flops": "live_figures performance_line",
    "backend.workflows.chat_tools": "ToolResult ToolRun",
}


def _names(table: dict[str, str]) -> dict[str, tuple[str, str]]:
    """A table's names, each -> (module, attribute)."""
    found = {}
    for module, names in table.items():
        for entry in names.split():
            name, _, attribute = entry.partition("=")
            found[name] = (module, attribute or name)
    return found


_LAZY_EXPORTS = _names(_LAZY)
globals().update(
    {name: getattr(importlib.import_module(module), attribute) for name, (module, attribute) in _names(_EAGER).items()}
)

# The UI's and the CLI's vocabulary: components/ and backend/cli/ import these from here and nothing from other
# backend modules (tests/unit/repo/test_layers.py).
__all__ = [*_names(_EAGER), *_LAZY_EXPORTS]


def __getattr__(name: str) -> Any:
    """The lazily re-exported names of ``_LAZY``, imported when the UI first asks for them."""
    if name in _LAZY_EXPORTS:
        module, attribute = _LAZY_EXPORTS[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value  # asked once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
