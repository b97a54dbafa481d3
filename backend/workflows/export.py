"""A finished job's merged model: its LoRA adapter folded into the base, saved whole under a temporary name, renamed.

peft's ``merge_and_unload`` adds the adapter's update to the base weights at the base's dtype. A job trained on a 4-
or 8-bit base is merged into the same base loaded unquantized at 16 bit (bitsandbytes weights cannot be saved as a
plain model), and the result says so. Everything is written to a hidden sibling folder first and renamed into place
at the end, so a failure (a full disk, a crash) leaves no half-written model behind.

An export job runs it in its worker (backend/workflows/export_job.py), so a merge's memory is never the app's and a
killed or stuck merge costs only itself (cancel it like any job).
"""

from __future__ import annotations

import errno
import logging
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from backend.core.artifacts import MergedExport
from backend.core.paths import DataPaths
from backend.hub.model_card import build_merged_card, merged_dtype_sentence
from backend.jobs.lineage import saved_adapter
from backend.jobs.records import JobRecord, JobStatus
from backend.models.loading import resolve_model
from backend.platform.resource_errors import looks_like_disk_full
from backend.workflows.archive import PARTIAL_MERGED, swap_into

log = logging.getLogger("studio.export")

PARTIAL_PREFIX = PARTIAL_MERGED  # a merged model being written, beside the folder it will be renamed to
SIXTEEN_BIT = ("bfloat16", "float16")
# The time limit of an export's child processes (the GGUF converter): a 7-8B model converts well within an hour.
TIMEOUT_VAR = "STUDIO_EXPORT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 3600


class ExportError(ValueError):
    """An export that did not happen, with one sentence saying why; nothing of it is left on disk."""


@dataclass(frozen=True)
class ExportResult:
    """A finished export: the folder, how it was merged, where it was pushed, and the sentence that says so."""

    path: Path
    dtype: str
    dequantized: bool
    sentence: str
    repo_id: str | None = None
    url: str | None = None
    push_error: str | None = None

    def record(self) -> MergedExport:
        """The export as the job's ``merged`` artifact."""
        return MergedExport(
            path=str(self.path),
            dtype=self.dtype,
            dequantized=self.dequantized,
            repo_id=self.repo_id,
            url=self.url,
            exported_at=time.time(),
        )


def merge_dtype(base_dtype: str | None, quant_mode: str) -> tuple[str, bool]:
    """(the dtype to merge and save in, whether a quantized job is dequantized): the base's own dtype; 16 bit for a
    4- or 8-bit job (its base's dtype if that is 16-bit, else bfloat16).

    >>> merge_dtype("float32", "none"), merge_dtype("float32", "4bit"), merge_dtype("float16", "4bit")
    (('float32', False), ('bfloat16', True), ('float16', True))
    """
    base_dtype = (base_dtype or "float32").removeprefix("torch.")
    if quant_mode == "none":
        return base_dtype, False
    return (base_dtype if base_dtype in SIXTEEN_BIT else "bfloat16"), True


def _base_dtype(base: str, job: JobRecord) -> str | None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        base, revision=job.spec.model.revision, trust_remote_code=job.spec.model.trust_remote_code
    )
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(dtype) if dtype is not None else None


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _write_merged(
    job: JobRecord, base: str, adapter: Path, target: Path, dtype: str, dequantized: bool, place: Path, sized: list[int]
) -> None:
    """Merge and save into ``target`` (a fresh folder, renamed to ``place`` after, which the card names); the merged
    weights' size in bytes goes into ``sized`` before they are written, so a full disk can say what was needed."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_spec = job.spec.model
    # No quantization_config: a quantized job's base is loaded unquantized, so the merge and the file are 16-bit.
    model = AutoModelForCausalLM.from_pretrained(
        base, dtype=getattr(torch, dtype), revision=model_spec.revision, trust_remote_code=model_spec.trust_remote_code
    )
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    sized.append(sum(p.numel() * p.element_size() for p in merged.parameters()))
    merged.save_pretrained(target, safe_serialization=True)
    if not (target / "generation_config.json").exists():
        merged.generation_config.save_pretrained(target)
    # The adapter folder keeps the tokenizer and chat template training used (the base's, or the parent's).
    AutoTokenizer.from_pretrained(str(adapter)).save_pretrained(target)
    build_merged_card(job, str(place), dtype, dequantized).save(target / "README.md")


def merge_job(job: JobRecord, paths: DataPaths, out: Path, replace: bool = False) -> ExportResult:
    """Merge a succeeded LoRA job into its base and save it as ``out``; ExportError with a sentence if not.

    ``out`` must not exist or be an empty folder, unless ``replace`` (the job's own export folder, exported again):
    then the old export is swapped out only once the new one is whole.
    """
    if job.status is not JobStatus.succeeded:
        raise ExportError(f"job {job.id} is {job.status.value}: only a job that succeeded has an adapter to merge")
    adapter = saved_adapter(job)
    if adapter is None:
        what = "an evaluation, which trains no adapter" if job.spec.evaluate is not None else "without a saved adapter"
        raise ExportError(f"job {job.id} ended {what}: there is nothing to merge")
    if not job.spec.lora.enabled:
        raise ExportError(f"job {job.id} trained all weights: its saved model is already whole, there is no adapter")
    out = Path(out).expanduser().absolute()
    if out.exists() and not replace and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} already exists and is not an empty folder: choose another output folder")
    base = resolve_model(job.spec.model, paths.models)
    try:
        base_dtype = _base_dtype(base, job)
    except Exception as exc:  # noqa: BLE001 - offline, gone, or not a model: one sentence
        raise ExportError(f"the base model {job.spec.model.name_or_path} cannot be read: {_first_line(exc)}") from None
    dtype, dequantized = merge_dtype(base_dtype, job.spec.quantization.mode)
    partial = out.parent / f"{PARTIAL_PREFIX}{out.name}-{secrets.token_hex(4)}"
    sized: list[int] = []
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_merged(job, base, adapter, partial, dtype, dequantized, out, sized)
        swap_into(partial, out, PARTIAL_PREFIX)
    except Exception as exc:
        shutil.rmtree(partial, ignore_errors=True)  # nothing half-written stays
        text = f"{type(exc).__name__}: {exc}"
        if looks_like_disk_full(text) or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
            need = f" (the merged weights alone are {sized[0] / 2**20:.1f} MiB)" if sized else ""
            raise ExportError(
                f"the disk at {out.parent} is full{need}: free space there or choose another output folder; "
                "nothing was left behind"
            ) from None
        if isinstance(exc, OSError) and exc.strerror:
            raise ExportError(
                f"the merged model could not be written to {out} ({exc.strerror}); nothing was left behind"
            ) from None
        log.exception("merging job %s failed", job.id)
        raise ExportError(f"the merge failed ({_first_line(exc)}); nothing was left behind") from None
    sentence = f"Merged job {job.id} into {out} ({_folder_bytes(out) / 2**20:.1f} MiB). " + merged_dtype_sentence(
        dtype, dequantized, job.spec.quantization.mode
    )
    log.info("%s", sentence)
    return ExportResult(path=out, dtype=dtype, dequantized=dequantized, sentence=sentence)
