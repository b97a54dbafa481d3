"""The backend facade: the one door of the UI and the CLI (submit, list, show, cancel, resume, metrics), and the
UI's whole vocabulary (types, enums, errors, catalogue), re-exported so ``components/`` imports nothing else.

The facade is split by concern into the modules of this package (``studio``, ``jobs``, ``datasets``,
``environments``, ``chat``, ``arena``, ``hub``, ``export``); this module re-exports what the UI and the CLI use."""

from __future__ import annotations

import importlib
from typing import Any

from backend.api.benchmarks import benchmark_choices
from backend.api.catalogue import (
    CURATED_MODELS,
    DEFAULT_HF_JOB_FLAVOR,
    HF_JOB_FLAVORS,
    REWARDS,
    Monitoring,
    SpecField,
    builtin_dataset_choices,
    builtin_dataset_help,
    environment_choices,
    field_methods,
    generates,
    method_part,
    methods,
    monitoring,
    spec_field,
)
from backend.api.common import MetricsPage, Submitted, WarmUp
from backend.api.studio import StudioAPI
from backend.core.artifacts import BenchmarkReport, LearningVerdict, SignalWatch
from backend.core.benchmarks import compare_rows as benchmark_compare_rows
from backend.core.learning import standing_warnings, status_text, verdict_metric_line
from backend.core.spec import JobSpec, Method, RewardSpec, SpecError, load_spec_text
from backend.core.users import User, hub_user, local_user
from backend.core.wording import EVALUATING, counted, progress_text
from backend.data.upload_store import StoredUpload, UploadShelf
from backend.jobs.scheduler import SchedulerHealth
from backend.jobs.store import InvalidTransition, JobNotFound, JobRecord, JobStatus, StoreError
from backend.models.demo import (
    ARITH_MODEL_ID,
    DEMO_MODEL_ID,
    DEMO_MODEL_NOTE,
    demo_model_note,
    demo_recipe,
    is_demo_model,
)
from backend.platform.hardware import detect_device
from backend.platform.hub_status import hub_status
from backend.platform.space_runtime import ZERO_GPU_REFUSAL, gpu_task, on_space, on_zero_gpu
from backend.platform.storage import StorageError

# The UI's vocabulary: components/ import these from here and nothing from other backend modules
# (tests/unit/api/test_facade.py).
__all__ = [
    "standing_warnings",
    "verdict_metric_line",
    "CHAT_MODES",
    "StudioAPI",
    "Submitted",
    "WarmUp",
    "MetricsPage",
    "SchedulerHealth",
    "JobSpec",
    "Method",
    "RewardSpec",
    "SpecError",
    "load_spec_text",
    "JobRecord",
    "JobStatus",
    "JobNotFound",
    "InvalidTransition",
    "StorageError",
    "StoreError",
    "User",
    "hub_user",
    "local_user",
    "on_space",
    "on_zero_gpu",
    "gpu_task",
    "ZERO_GPU_REFUSAL",
    "detect_device",
    "hub_status",
    "DEMO_MODEL_ID",
    "DEMO_MODEL_NOTE",
    "is_demo_model",
    "ARITH_MODEL_ID",
    "demo_model_note",
    "demo_recipe",
    "CURATED_MODELS",
    "HF_JOB_FLAVORS",
    "DEFAULT_HF_JOB_FLAVOR",
    "REWARDS",
    "SpecField",
    "spec_field",
    "methods",
    "method_part",
    "field_methods",
    "generates",
    "environment_choices",
    "builtin_dataset_choices",
    "builtin_dataset_help",
    "Monitoring",
    "monitoring",
    "status_text",
    "progress_text",
    "EVALUATING",
    "counted",
    "LearningVerdict",
    "SignalWatch",
    "StoredUpload",
    "UploadShelf",
    "BenchmarkReport",
    "benchmark_choices",
    "benchmark_compare_rows",
]


# Re-exported on first use (PEP 562): these modules load torch, transformers, datasets or huggingface_hub, which
# the CLI and the scheduler should not pay for at start-up.
_LAZY_EXPORTS = {
    "GenerationSettings": "backend.models.mixed_batch",
    "message_text": "backend.chat.side_by_side",
    "CHAT_MODES": "backend.chat.side_by_side",
    "UnmappedUpload": "backend.data.uploads",
    "PushError": "backend.hub.publish",
    "ExportError": "backend.workflows.export",
    "snippets_markdown": "backend.hub.snippets",
    "RemoteJobError": "backend.hub.hf_jobs",
    "live_figures": "backend.training.flops",
    "performance_line": "backend.training.flops",
    "ChatAnswer": "backend.chat.tool_calls",
    "ToolCall": "backend.chat.tool_calls",
    "ToolResult": "backend.workflows.chat_tools",
    "ToolRun": "backend.workflows.chat_tools",
}


def __getattr__(name: str) -> Any:
    """The lazily re-exported names of ``_LAZY_EXPORTS``, imported when the UI first asks for them."""
    if name in _LAZY_EXPORTS:
        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
