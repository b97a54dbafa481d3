"""The typed job spec: one validated description of a training job, from the form to the worker.

Its modules, bottom-up: ``errors`` (SpecError and its sentences), ``base`` (the part base class), ``parts`` (what
every job reads), ``methods`` (the method names, each method's own part and the shared rollout),
``environment`` (the OpenEnv part), ``job`` (``JobSpec``), ``io`` (parse and load) and ``fields`` (field help).
The names below are the spec's face: ``from backend.core.spec import JobSpec``.
"""

from backend.core.spec.environment import BUILTIN_ENVIRONMENT_NAMES, EnvironmentSpec, remote_environment_problem
from backend.core.spec.errors import SpecError, quote_input, shorten
from backend.core.spec.fields import field_docs, field_help, spec_fields_markdown
from backend.core.spec.io import load_spec_text, parse_spec, with_settings
from backend.core.spec.job import JobSpec, checkpointing, environment_methods, methods_reading, online_methods
from backend.core.spec.methods import REWARD_NAMES, Method, OnlinePart, RewardSpec
from backend.core.spec.parts import (
    EXPORT_FORMATS,
    GGUF_TYPES,
    DatasetSpec,
    ExportSpec,
    LoraSpec,
    ModelSpec,
    QuantizationSpec,
)

__all__ = [
    "BUILTIN_ENVIRONMENT_NAMES",
    "EXPORT_FORMATS",
    "GGUF_TYPES",
    "REWARD_NAMES",
    "DatasetSpec",
    "EnvironmentSpec",
    "ExportSpec",
    "JobSpec",
    "LoraSpec",
    "Method",
    "ModelSpec",
    "OnlinePart",
    "QuantizationSpec",
    "RewardSpec",
    "SpecError",
    "checkpointing",
    "environment_methods",
    "field_docs",
    "field_help",
    "load_spec_text",
    "methods_reading",
    "online_methods",
    "parse_spec",
    "quote_input",
    "remote_environment_problem",
    "shorten",
    "spec_fields_markdown",
    "with_settings",
]
