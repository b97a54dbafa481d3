"""A finished job's merged model as one GGUF file for llama.cpp, LM Studio and Ollama, checked against the merged model.

The export job (part of the queue, in the worker's process) merges the job first (``export.merge_job``), then calls
:func:`export_gguf`, which

1. converts the merged folder with llama.cpp's own converter (``convert_hf_to_gguf.py``, installed by
   ``scripts/install_gguf_converter.py``, never copied here) in a child process of the trainer's interpreter
   (``python -m backend.workflows.gguf_child``), with a time limit (``STUDIO_EXPORT_TIMEOUT_S``); the child writes under
   a temporary name that is renamed only once the converter finished;
2. writes the Ollama ``Modelfile`` (``backend/hub/modelfile.py``: the chat template translated, stop tokens, the
   system prompt every row opened with) and checks the GGUF against the merged model on the job's held-out rows
   (``gguf_check.py``);
3. writes the card (``backend/hub/gguf_card.py``) and renames the whole folder into place, replacing the previous
   GGUF export of the job only then: a failure or a killed conversion leaves nothing half-written, and the previous
   export stays as it was.

Types: ``f16`` and ``q8_0`` (:data:`GGUF_TYPES`), which the converter writes itself in Python (``gguf-py``). ``q4_k_m``
is not offered: gguf-py has no Q4_K quantizer (it only reads Q4_K) and the converter does not write it; it needs
llama.cpp compiled (``llama-quantize``, or ``llama_model_quantize`` of a built llama-cpp-python), see docs/hub.md.

The demo models' tokenizer is not in the converter's table of pre-tokenizers; ``gguf_child`` registers it under
``smollm``, whose splitting is the demo tokenizer's own (its docstring says why and how it was measured).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from backend.core.artifacts import GgufExport
from backend.core.hub_names import slug
from backend.core.paths import DataPaths
from backend.hub.gguf_card import build_gguf_card
from backend.hub.modelfile import build_modelfile
from backend.jobs.records import JobRecord
from backend.platform.gguf_converter import converter_dir
from backend.platform.gguf_converter import converter_problem as converter_problem
from backend.platform.interpreters import backend_env, trainer_python
from backend.platform.limits import int_setting
from backend.platform.resource_errors import looks_like_disk_full
from backend.workflows.archive import PARTIAL_GGUF, swap_into
from backend.workflows.export import DEFAULT_TIMEOUT_S, TIMEOUT_VAR, ExportError
from backend.workflows.gguf_check import check_rows, quant_check, row_cap

log = logging.getLogger("studio.export")

GGUF_TYPES = ("f16", "q8_0")
CHILD_MODULE = "backend.workflows.gguf_child"
MODELFILE = "Modelfile"
CARD = "README.md"


def gguf_file_name(job: JobRecord, gguf_type: str) -> str:
    """``<run name or job id>-<type>.gguf``, safe as a file name.

    The job's run name, else its id: ``my-run-q8_0.gguf``.
    """
    return f"{slug(job.spec.output.run_name or job.id)}-{gguf_type}.gguf"


def _converter_failure(returncode: int, log_text: str, timeout: int | None) -> str:
    """One sentence for a conversion that did not finish, from its exit and the end of its log."""
    if timeout is not None:
        return f"the GGUF conversion took longer than {timeout} s ({TIMEOUT_VAR}) and was stopped"
    if returncode == -signal.SIGKILL:
        return "the GGUF conversion was killed (SIGKILL), most likely out of memory"
    if "BPE pre-tokenizer was not recognized" in log_text:
        return (
            "llama.cpp's converter does not know this model's tokenizer (its pre-tokenizer is not in the converter's "
            "table): only models whose tokenizer llama.cpp supports can be exported as GGUF"
        )
    if "not supported" in log_text and "Architecture" in log_text:
        architecture = log_text.split("Architecture", 1)[1].split("not supported", 1)[0].strip(" '\"!")
        return f"llama.cpp's converter does not support the architecture {architecture}"
    if "No module named 'sentencepiece'" in log_text:
        return (
            "the model's tokenizer is a SentencePiece one (tokenizer.model), which the converter reads with the "
            "sentencepiece package: install it in the trainer's environment"
        )
    if looks_like_disk_full(log_text):
        return "the disk is full: free space for the GGUF file (about the size of the merged model) and try again"
    last = next((line.strip() for line in reversed(log_text.splitlines()) if line.strip()), "no output")
    return f"the GGUF conversion failed (exit {returncode}: {last[:200]})"


def convert_model(model_dir: Path, out_file: Path, gguf_type: str) -> float:
    """Convert the merged model in ``model_dir`` into ``out_file`` (of ``gguf_type``) with llama.cpp's converter in a
    child process; the seconds it took. ExportError with a sentence when it fails, is killed or runs out of time: the
    file is written as ``.<name>.partial`` beside ``out_file`` and renamed only when whole, so nothing half-written
    is ever named ``out_file``."""
    if gguf_type not in GGUF_TYPES:
        raise ExportError(f"the GGUF type {gguf_type!r} is not one of {', '.join(GGUF_TYPES)}")
    problem = converter_problem()
    if problem is not None:
        raise ExportError(problem)
    partial = out_file.with_name(f".{out_file.name}.partial")
    timeout = int_setting(TIMEOUT_VAR, DEFAULT_TIMEOUT_S)
    command = [trainer_python(), "-m", CHILD_MODULE, "--converter", str(converter_dir()), "--", str(model_dir)]
    command += ["--outtype", gguf_type, "--outfile", str(partial)]
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+", prefix="studio-gguf-") as output:
        child = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=backend_env(), start_new_session=True
        )
        timed_out = None
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = timeout
        finally:
            if child.poll() is None:  # timed out, or this process was interrupted: the child goes too
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        output.seek(0)
        log_text = output.read()[-20000:]
    if timed_out is not None or child.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        log.warning("the GGUF conversion of %s ended with %s: %s", model_dir, child.returncode, log_text[-2000:])
        raise ExportError(_converter_failure(child.returncode, log_text, timed_out) + "; nothing was left behind")
    partial.replace(out_file)
    return time.monotonic() - started


def _eos_ids(model_dir: Path) -> list[int]:
    """The end-of-sequence ids of the merged model's generation config (Ollama's stop tokens come from them too)."""
    try:
        value = json.loads((model_dir / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError):
        return []
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int)]


def sweep_partials(out_folder: Path) -> None:
    """Remove what a stopped export to ``out_folder`` left (its temporary folders; never the export itself)."""
    for partial in Path(out_folder).parent.glob(f"{PARTIAL_GGUF}*{Path(out_folder).name}-*"):
        shutil.rmtree(partial, ignore_errors=True)


def export_gguf(
    job: JobRecord,
    paths: DataPaths,
    merged_dir: Path,
    out_folder: Path,
    gguf_type: str,
    progress: Callable[[str], None],
) -> GgufExport:
    """Convert the job's merged model (``merged_dir``, as ``merge_job`` writes it) to one GGUF of ``gguf_type`` with
    its Modelfile and card, checked against the merged model, all in ``out_folder`` (replacing the job's previous GGUF
    export there once the new one is whole). ``progress`` is told "converting", then "checking". ExportError with
    one sentence when it fails; nothing of it is left behind."""
    if gguf_type not in GGUF_TYPES:
        raise ExportError(
            f"the GGUF type {gguf_type!r} is not offered: choose {' or '.join(GGUF_TYPES)} (q4_k_m needs llama.cpp's "
            "llama-quantize, which the studio does not build)"
        )
    problem = converter_problem()
    if problem is not None:
        raise ExportError(problem)
    merged_dir, out_folder = Path(merged_dir).absolute(), Path(out_folder).expanduser().absolute()
    name = gguf_file_name(job, gguf_type)
    partial = out_folder.parent / f"{PARTIAL_GGUF}{out_folder.name}-{secrets.token_hex(4)}"
    try:
        partial.mkdir(parents=True)
        progress("converting")
        seconds = {"converting": round(convert_model(merged_dir, partial / name, gguf_type), 1)}
        progress("checking")
        started = time.monotonic()
        record = _check_and_describe(job, paths, merged_dir, partial, name, gguf_type, out_folder)
        seconds["checking"] = round(time.monotonic() - started, 1)
        record = record.model_copy(update={"seconds": seconds, "exported_at": time.time()})
        build_gguf_card(job, record).save(partial / CARD)
        swap_into(partial, out_folder, PARTIAL_GGUF)
    except ExportError:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    except Exception as exc:
        shutil.rmtree(partial, ignore_errors=True)  # nothing half-written stays
        text = f"{type(exc).__name__}: {exc}"
        if looks_like_disk_full(text) or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
            raise ExportError(
                f"the disk at {out_folder.parent} is full: free space there (the GGUF is about the size of the merged "
                "model) and export again; nothing was left behind"
            ) from None
        log.exception("the GGUF export of job %s failed", job.id)
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ExportError(f"the GGUF export failed ({type(exc).__name__}: {first}); nothing was left behind") from None
    log.info("exported job %s as %s (%d bytes)", job.id, out_folder / name, record.bytes)
    return record


def _check_and_describe(
    job: JobRecord, paths: DataPaths, merged_dir: Path, folder: Path, name: str, gguf_type: str, out_folder: Path
) -> GgufExport:
    """Write the Modelfile and run the quant check in ``folder``; the export's record, naming its final place."""
    from transformers import AutoTokenizer

    try:
        rows = check_rows(job, paths, max_rows=row_cap(merged_dir))
        system = rows.system
    except Exception as exc:  # noqa: BLE001 - the check says why; the Modelfile goes without a system prompt
        log.warning("the rows of job %s could not be loaded for the GGUF check: %s", job.id, exc)
        rows, system = None, None
    modelfile, note = build_modelfile(AutoTokenizer.from_pretrained(merged_dir), name, system, _eos_ids(merged_dir))
    (folder / MODELFILE).write_text(modelfile)
    if note:
        log.info("Modelfile: %s", note)
    check = quant_check(job, paths, merged_dir, folder / name, gguf_type, rows)
    log.info("quant check: %s", check.sentence or check.error)
    return GgufExport(
        path=str(out_folder / name),
        gguf_type=gguf_type,
        bytes=(folder / name).stat().st_size,
        modelfile=str(out_folder / MODELFILE),
        modelfile_note=note,
        quant_check=check,
    )
