"""Uploaded dataset files: checked for the chosen method before they are kept, so a bad upload leaves nothing behind.

A file that reads well but whose columns are named differently is kept (UnmappedUpload): filling the Column mapping
afterwards makes it usable without uploading it again (``check_upload``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from backend.core.paths import safe_name, storage_problem
from backend.core.spec import DatasetSpec, Method, SpecError
from backend.core.uploads import upload_display_name, upload_file
from backend.core.wording import counted
from backend.data import upload_limits
from backend.data.loading import FILE_LOADERS, ColumnsMismatch, load_training_dataset
from backend.data.user_cache import LEFTOVER_AGE_S, STAGING, cache_root, read_folder
from backend.platform.child_env import child_environment, run_json_child
from backend.platform.resource_errors import looks_like_oom

MAX_UPLOAD_BYTES = 512 * 2**20
CHECK_MEMORY_BYTES = 2 * 2**30  # address space a check may add to what its interpreter starts with
CHECK_SECONDS = 120  # CPU seconds, and seconds of wall time, a check may take
ANSWERS = ("ok", "columns", "refused", "failed")  # what the check child answers (``_child``)
# What one check may hold in all: its interpreter with datasets imported (about 300 MB) plus CHECK_MEMORY_BYTES.
CHECK_FOOTPRINT_BYTES = CHECK_MEMORY_BYTES + 384 * 2**20


class UnmappedUpload(SpecError):
    """The file was kept (it reads well) but its columns need a mapping for the method; ``problems`` say which."""

    def __init__(self, problems: list[str], upload_id: str, summary: str):
        super().__init__(problems)
        self.upload_id, self.summary = upload_id, summary


def _checked_here(
    upload_id: str,
    display: str,
    method: Method,
    uploads_dir: Path,
    columns: dict[str, str] | None,
    cache: Path | None = None,
) -> str:
    """Load a kept upload as the trainer would (with ``columns``) within the limits on what it decodes to; its
    one-line summary, or SpecError (ColumnsMismatch when only the mapping is missing). The rows are read into memory:
    datasets' Arrow copy is made in ``cache`` (by default the owner's datasets cache) and removed."""
    upload_limits.before_decoding(upload_file(uploads_dir, upload_id), display)
    dataset, fmt = load_training_dataset(
        DatasetSpec(source="upload", name=upload_id, columns=columns or {}),
        method,
        uploads_dir=uploads_dir,
        cache=cache,
        check_raw=lambda rows: upload_limits.after_decoding(rows, display),
    )
    return f"{display}: {counted(len(dataset), 'row')}, {fmt} format, columns {', '.join(dataset.column_names)}"


def _checked(upload_id: str, display: str, method: Method, uploads_dir: Path, columns: dict[str, str] | None) -> str:
    """``_checked_here`` in a fresh interpreter (``python -m backend.data.uploads``) with limits on memory, CPU and wall
    time, where a reader's crash (a segfault in a parser), a memory bomb or a hang cannot reach the app: each is a
    sentence (SpecError). Only the request goes in (on stdin) and one JSON answer comes out (on stdout); the child
    never imports the app, opens the store or sees another user's files."""
    request = {
        "upload_id": upload_id,
        "display": display,
        "method": method.value,
        "uploads_dir": str(uploads_dir),
        "columns": columns or {},
        "memory": CHECK_MEMORY_BYTES,
        "cpu": CHECK_SECONDS,
        "limits": {name: getattr(upload_limits, name) for name in upload_limits.LIMITS},
    }
    unsafe = f"dataset: {display} could not be read safely"
    try:
        # The child's Arrow copy goes in a folder of the owner's that this process removes, however the child ends.
        with read_folder(cache_root(uploads_dir)) as cache:
            # an allow-listed environment: the owner's HF_TOKEN and OAuth secret stay in the app
            done = run_json_child(
                "backend.data.uploads", {**request, "cache": str(cache)}, ANSWERS, CHECK_SECONDS, child_environment()
            )
    except subprocess.TimeoutExpired:  # run() killed it
        raise SpecError([f"{unsafe}: reading it took more than {CHECK_SECONDS} s"]) from None
    except OSError as exc:  # no process could start (out of processes or memory): the app's trouble, said so
        raise SpecError(
            [f"dataset: {display} could not be checked just now ({exc.strerror or exc}); try again"]
        ) from None
    kind, value = done.kind, done.value
    if kind == "ok":
        return value
    if kind == "columns":
        raise ColumnsMismatch(value)
    if kind == "refused":
        raise SpecError(value)
    if kind == "died" and done.returncode == -signal.SIGXCPU:
        raise SpecError([f"{unsafe}: reading it took more than {CHECK_SECONDS} s of CPU"])
    if kind == "failed" and not looks_like_oom(value) and "MemoryError" not in value:
        raise SpecError([f"dataset: {display} could not be read ({value})"])
    if (
        kind == "failed"
        or "MemoryError" in done.stderr
        or looks_like_oom(done.stderr)
        or done.returncode == -signal.SIGKILL
    ):
        raise SpecError([f"{unsafe}: it needs more than {CHECK_MEMORY_BYTES // 2**20} MB of memory to read"])
    raise SpecError(
        [
            f"{unsafe}: the reader crashed on it ({done.how_it_stopped()}); check that it is well-formed and not "
            "nested deeply"
        ]
    )


def _child() -> None:
    """``python -m backend.data.uploads``: one check with limits on itself, its answer as one JSON line on stdout."""
    import resource

    request = json.loads(sys.stdin.read())
    for name, value in request["limits"].items():
        setattr(upload_limits, name, value)
    import datasets  # noqa: F401 - imported before the limit, which then counts only what the check adds
    import pyarrow.json  # noqa: F401

    with open("/proc/self/statm") as fh:
        start = int(fh.read().split()[0]) * resource.getpagesize()
    memory = start + request["memory"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (request["cpu"], request["cpu"] + 5))
    try:
        answer: tuple[str, object] = (
            "ok",
            _checked_here(
                request["upload_id"],
                request["display"],
                Method(request["method"]),
                Path(request["uploads_dir"]),
                request["columns"],
                Path(request["cache"]),
            ),
        )
    except ColumnsMismatch as exc:
        answer = ("columns", exc.problems)
    except SpecError as exc:
        answer = ("refused", exc.problems)
    except Exception as exc:  # noqa: BLE001 - whatever the reader raised is the answer
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        answer = ("failed", f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    sys.stdout.flush()


def check_upload(upload_id: str, method: Method, uploads_dir: Path, columns: dict[str, str] | None = None) -> str:
    """Check a kept upload again (after the Column mapping or the method changed): its summary, or SpecError."""
    display = upload_display_name(upload_id)
    try:
        return _checked(upload_id, display, method, uploads_dir, columns)
    except SpecError as exc:
        raise SpecError([p.replace(upload_id, display) for p in exc.problems]) from None


def keep_upload(
    source: Path, original_name: str, method: Method, uploads_dir: Path, columns: dict[str, str] | None = None
) -> tuple[str, str]:
    """Copy an uploaded file into ``uploads_dir`` (one user's folder) if it loads as a dataset for ``method``.

    ``columns`` is the Column mapping (expected -> the file's column) to check it with. Returns (upload id, a
    one-line summary); the id is what ``dataset.name`` holds with ``source: upload``. A readable file whose columns
    do not fit is kept and UnmappedUpload says what to map. Raises SpecError with the reason otherwise, keeping
    nothing: no copy, and no Arrow files in the datasets cache.
    """
    suffix = Path(original_name).suffix.lower()
    if suffix not in FILE_LOADERS:
        raise SpecError([f"dataset: {original_name} is not a dataset file; upload .jsonl, .json, .csv or .parquet"])
    if source.stat().st_size == 0:
        raise SpecError([f"dataset: {original_name} is empty"])
    if source.stat().st_size > MAX_UPLOAD_BYTES:
        raise SpecError([f"dataset: {original_name} is larger than {MAX_UPLOAD_BYTES // 2**20} MB; use a Hub dataset"])
    stem = safe_name(Path(original_name).stem)[:64] or "data"
    upload_id = f"{uuid.uuid4().hex[:12]}-{stem}{suffix}"
    # Copied and checked in a staging folder, and moved in only once it passed: a crash or a kill on the way
    # (the app's, mid-copy or mid-check) never leaves a half file where uploads are looked up.
    staging = uploads_dir / STAGING
    staged = staging / upload_id
    try:
        for attempt in range(3):  # another upload of this user's may remove the empty folder just after mkdir
            staging.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(source, staged)
                break
            except FileNotFoundError:
                if attempt == 2 or not source.is_file():
                    raise
    except OSError as exc:
        _unstage(staged)
        raise SpecError([f"dataset: {original_name} was not kept: {storage_problem(exc)}"]) from None
    try:
        summary = _checked(upload_id, original_name, method, staging, columns)
    except ColumnsMismatch as exc:
        problems = [p.replace(upload_display_name(upload_id), original_name) for p in exc.problems]
        summary = f"{original_name}: kept; usable for {method.value.upper()} once its columns are mapped"
        _unstage(staged, uploads_dir / upload_id)
        raise UnmappedUpload(problems, upload_id, summary) from None
    except SpecError as exc:
        _unstage(staged)
        problems = [p.replace(upload_display_name(upload_id), original_name) for p in exc.problems]
        raise SpecError(problems) from None
    except BaseException as exc:
        _unstage(staged)
        if not isinstance(exc, Exception):
            raise
        raise SpecError([f"dataset: {original_name} could not be read ({exc})"]) from None
    _unstage(staged, uploads_dir / upload_id)
    return upload_id, summary


def _unstage(staged: Path, keep_as: Path | None = None) -> None:
    """Move a checked upload in (or drop a refused one), and remove the staging folder once it is empty."""
    if keep_as is not None:
        os.replace(staged, keep_as)
    else:
        staged.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        staged.parent.rmdir()


def sweep_staging(uploads_root: Path, older_than_s: float = LEFTOVER_AGE_S) -> int:
    """Remove what a crash left in every user's staging folder (files never handed out), once older than any check
    still running in another process could be; how many were removed."""
    removed = 0
    for leftover in uploads_root.glob(f"*/{STAGING}/*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > older_than_s:
                leftover.unlink()
                removed += 1
    return removed


if __name__ == "__main__":
    _child()
