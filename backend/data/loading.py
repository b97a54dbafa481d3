"""Loads a job's dataset (built-in, upload, file or Hub), applies the column mapping and checks it fits the method."""

from __future__ import annotations

import codecs
import errno
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from backend.core.spec import DatasetSpec, JobSpec, Method, SpecError, quote_input
from backend.core.uploads import UPLOAD_AGAIN, upload_display_name, upload_file
from backend.core.wording import counted
from backend.data.builtin import BUILTIN_DATASETS
from backend.data.user_cache import cache_root, read_folder
from backend.methods.table import DataFormat, reward_columns, support

if TYPE_CHECKING:
    from datasets import Dataset

EMPTY_DATASET = "dataset: it has no rows; add examples or pick another split"
FILE_LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
# datasets (4.x) wraps every download, a local file's included, in ``unittest.mock.patch.dict(os.environ, {...})``,
# whose exit empties os.environ key by key and refills it. For that instant every other thread of the process reads
# no ``SPACE_ID``, no ``STUDIO_ENVIRONMENT_HOSTS``, no token: one user's submit made another user's environment
# refused (or, read the other way round, unguarded). The flag it sets is set once instead, and never taken away.
_STACKED_BARS = "HF_DATASETS_STACK_MULTIPROCESSING_DOWNLOAD_PROGRESS_BARS"


@contextmanager
def _environment_left_whole() -> Iterator[None]:
    os.environ.setdefault(_STACKED_BARS, "1")
    yield


@cache
def _load_dataset() -> Callable[..., Dataset]:
    """datasets' ``load_dataset``, its downloads made to leave os.environ whole (see ``_STACKED_BARS``): patched once
    per process, on first use."""
    from datasets import load_dataset
    from datasets.download import download_manager

    download_manager.stack_multiprocessing_download_progress_bars = _environment_left_whole
    return load_dataset


def _load_raw(
    spec: DatasetSpec, uploads_dir: Path | None = None, cache: Path | None = None, kept_in: Path | None = None
) -> Dataset:
    load_dataset = _load_dataset()
    if spec.source == "builtin":
        builtin = BUILTIN_DATASETS.get(spec.name)
        if builtin is None:
            raise SpecError(
                [f"dataset.name: no built-in dataset {spec.name!r}; choose one of {', '.join(BUILTIN_DATASETS)}"]
            )
        # Shipped files of a few KB, read as a user's are (no copy left in the shared cache)
        return load_file(builtin.path, builtin.path.name, cache, kept_in=kept_in)
    if spec.source == "upload":
        if uploads_dir is None:  # a caller that forgot whose uploads these are must not guess
            raise SpecError([f"dataset.name: upload {quote_input(spec.name)} has no owner here; {UPLOAD_AGAIN}"])
        path = upload_file(uploads_dir, spec.name)
        return load_file(path, upload_display_name(spec.name), cache or cache_root(uploads_dir), kept_in=kept_in)
    if spec.source == "file":
        path = Path(spec.name).expanduser()
        if not path.is_file():
            raise SpecError([f"dataset.name: file {spec.name} does not exist"])
        return load_file(path, path.name, _owners(cache, uploads_dir), kept_in=kept_in)
    try:
        return load_dataset(spec.name, spec.config, split=spec.split)
    except Exception as exc:
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError([f"dataset.name: Hub dataset {spec.name!r} could not be loaded ({cause})"]) from None


def load_file(
    path: Path,
    display_name: str,
    cache: Path | None = None,
    field: str = "dataset.name",
    kept_in: Path | None = None,
) -> Dataset:
    """A .jsonl/.json/.csv/.parquet file as a Dataset held in memory; errors name the file as its owner knows it, at
    ``field`` (the setting that named the file).

    The Arrow copy datasets makes is written in a folder of its own inside ``cache`` (a user's datasets cache in the
    data folder, ``backend/data/user_cache.py``; the system's temporary folder when None) and removed before this
    returns: nothing stays on disk, and nothing reaches the shared datasets cache.

    With ``kept_in``, a folder the caller holds for as long as it uses the rows and then removes (a training job,
    whose trainer writes what it makes of the rows beside them), the rows are memory-mapped from their copy there
    instead of held in memory.
    """
    load_dataset = _load_dataset()
    loader = FILE_LOADERS.get(path.suffix.lower())
    if loader is None:
        raise SpecError([f"{field}: {display_name} is not a supported file type; use one of {', '.join(FILE_LOADERS)}"])

    def load(into: Path, in_memory: bool) -> Dataset:
        return load_dataset(loader, data_files=str(path), split="train", cache_dir=str(into), keep_in_memory=in_memory)

    try:
        try:
            if kept_in is not None:
                return load(kept_in, False)
            with read_folder(cache) as folder:
                return load(folder, True)
        except OSError as exc:
            if not _no_room(exc):
                raise
            # The data folder takes no copy now (full, read-only): the rows are still read, through the system's
            # temporary folder, into memory; nothing stays there either.
            with read_folder(None) as folder:
                return load(folder, True)
    except Exception as exc:  # datasets raises many types for a malformed file; the cause is what matters
        if "corresponds to no data" in str(exc):  # how datasets reports a file with a header and no rows
            raise SpecError(
                [EMPTY_DATASET if field == "dataset.name" else f"{field}: {display_name} has no rows"]
            ) from None
        kind = path.suffix.lstrip(".").upper()
        # datasets says only "An error occurred while generating the dataset": say what is wrong where it can be
        found = not_of_kind(path) or (first_bad_json_line(path) if path.suffix.lower() == ".jsonl" else None)
        if found is not None:
            raise SpecError([f"{field}: {display_name} could not be read as {kind}: {found}"]) from None
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        cause = cause.replace(path.name, display_name)
        raise SpecError([f"{field}: {display_name} could not be read as {kind} ({cause})"]) from None


def _no_room(exc: OSError) -> bool:
    """Whether writing a copy failed for want of room: a full disk, a quota, a read-only mount (or datasets' own
    free-space check, which says so before it writes).

    >>> _no_room(OSError(28, "No space left on device")), _no_room(OSError("Not enough disk space. Needed: 1 MB"))
    (True, True)
    """
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or "Not enough disk space" in str(exc)


_SNIFF_BYTES = 1 << 16


def not_of_kind(path: Path) -> str | None:
    """Why a file is plainly not of the kind its name says (binary data named .jsonl/.json/.csv, a .parquet without
    Parquet's signature), or None when it may be: an image or an archive renamed is told apart from a typo.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     png, csv = Path(folder, "a.csv"), Path(folder, "b.csv")
    ...     _ = png.write_bytes(b"\\x89PNG\\r\\n\\x1a\\n\\x00\\x00")
    ...     _ = csv.write_text("a,b\\n1,2\\n")
    ...     not_of_kind(png), not_of_kind(csv)
    ('it is not text but binary data (an image or an archive, renamed?)', None)
    """
    with path.open("rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    if path.suffix.lower() == ".parquet":
        return None if head.startswith(b"PAR1") else "it does not start as a Parquet file does (PAR1)"
    try:  # not final: a character cut at the end of the sample is not counted against the file
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < _SNIFF_BYTES)
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        return "it is not text but binary data (an image or an archive, renamed?)"
    return None


def first_bad_json_line(path: Path) -> str | None:
    """What is wrong with the first line of a JSONL file that is not one JSON object ("line 7 is not valid JSON:
    ..."), or None when every line is one (blank lines are skipped, as the reader skips them).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     good, bad = Path(folder, "good.jsonl"), Path(folder, "bad.jsonl")
    ...     _ = good.write_text('{"a": 1}\\n\\n{"a": 2}\\n')
    ...     _ = bad.write_text('{"a": 1}\\n{"a": 2,\\n')
    ...     first_bad_json_line(good), first_bad_json_line(bad)
    (None, 'line 2 is not valid JSON: Expecting property name enclosed in double quotes (column 9)')
    """
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                return f"line {number} is not text (is it a binary file, an image or an archive, renamed?)"
            if not text.strip():
                continue
            try:
                value = json.loads(text.rstrip("\r\n"))
            except ValueError as exc:
                where = f" (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                return f"line {number} is not valid JSON: {reason}{where}"
            if not isinstance(value, dict):
                return f"line {number} is not a JSON object ({{...}}) but {quote_input(text.strip())}"
    return None


def _owners(cache: Path | None, uploads_dir: Path | None) -> Path | None:
    """Where a read's copy goes: ``cache``, else the owner's datasets cache when the caller says whose read it is."""
    return cache or (cache_root(uploads_dir) if uploads_dir is not None else None)


class ColumnsMismatch(SpecError):
    """The data loads but its columns do not fit the method: a column mapping fixes it (the file itself is fine)."""


MAPPING_NAME = "“Column mapping”"  # what the Train tab calls dataset.columns; messages use the UI's words


def mapping_example(columns: list[str], method: Method) -> str:
    """A column mapping that would fit ``columns`` to ``method``, to quote in a message: ``prompt=question, ...``.

    >>> mapping_example(["question", "answer"], Method.sft)
    'prompt=question, completion=answer'
    """
    formats = [f.columns for f in support(method).formats]
    unused = [c for c in columns if not any(c in required for required in formats)] or list(columns)
    # The format that names as many columns as the data has left over reads most naturally.
    required = next((r for r in formats if len(r) == len(unused)), formats[0])
    return ", ".join(f"{want}={have}" for want, have in zip(required, unused)) or f"{required[0]}=your_column"


def apply_column_mapping(ds: Dataset, mapping: dict[str, str]) -> Dataset:
    """Rename the user's columns to the names TRL expects (mapping: expected -> user's)."""
    missing = [src for src in mapping.values() if src not in ds.column_names]
    if missing:
        raise ColumnsMismatch(
            [
                f"dataset: {MAPPING_NAME}: column {m!r} is not in the dataset "
                f"(its columns: {', '.join(ds.column_names)})"
                for m in missing
            ]
        )
    renames = {src: dst for dst, src in mapping.items() if src != dst}
    clashing = [dst for dst in renames.values() if dst in ds.column_names and dst not in renames]
    if clashing:
        ds = ds.remove_columns(clashing)
    return ds.rename_columns(renames) if renames else ds


def find_format(columns: list[str], method: Method) -> DataFormat:
    """The first dataset format of ``method`` whose columns are all present, else an actionable SpecError."""
    formats = support(method).formats
    for data_format in formats:
        if all(c in columns for c in data_format.columns):
            return data_format
    wanted = " or ".join("/".join(f.columns) for f in formats)
    raise ColumnsMismatch(
        [
            f"dataset: {support(method).label} needs columns {wanted}; the dataset has {', '.join(columns) or 'none'}. "
            f"Fill {MAPPING_NAME} with expected=your_column, e.g. {mapping_example(columns, method)}."
        ]
    )


def detect_format(columns: list[str], method: Method) -> tuple[str, tuple[str, ...]]:
    """(format name, required columns) of the first format of ``method`` the columns fit (see ``find_format``)."""
    data_format = find_format(columns, method)
    return data_format.name, data_format.columns


class JobData(NamedTuple):
    """A job's rows as its trainer reads them, and their detected format: what :func:`load_training_dataset` loads."""

    rows: Dataset
    format: str


def load_job_data(spec: JobSpec, uploads_dir: Path | None, kept_in: Path | None = None) -> JobData:
    """The job's rows as its trainer reads them: with the columns its rewards read, and every column for a job with an
    environment (its ``reset`` receives them all). ``uploads_dir`` is the owner's uploads folder (the owner the job is
    stored under: whose upload the id names); the rows are memory-mapped from ``kept_in`` when the caller holds such a
    folder (``user_cache.held_folder``), else held in memory."""
    return load_training_dataset(
        spec.dataset,
        spec.method,
        reward_columns(spec),
        keep_all=bool(spec.environment.name),
        uploads_dir=uploads_dir,
        kept_in=kept_in,
    )


def load_training_dataset(
    spec: DatasetSpec,
    method: Method,
    keep_columns: set[str] = frozenset(),
    keep_all: bool = False,
    uploads_dir: Path | None = None,
    cache: Path | None = None,
    kept_in: Path | None = None,
    check_raw: Callable[[Dataset], None] | None = None,
) -> JobData:
    """The dataset ready for the trainer (mapped, trimmed to the needed columns) and its detected format.

    ``keep_columns`` are extra columns the job needs (e.g. a reward's ground truth); missing ones are an error.
    ``keep_all`` keeps every column (an environment's ``reset`` receives them all).
    ``uploads_dir`` is the job owner's uploads folder, where a ``source: upload`` id is looked up.
    A user's file is read into memory, its Arrow copy made in ``cache`` (by default the owner's datasets cache,
    backend/data/user_cache.py) and removed; or memory-mapped from ``kept_in``, a folder the caller holds and removes
    (``load_file``).
    ``check_raw`` sees the rows as loaded, before anything else (the upload limits raise SpecError there).
    """
    ds = _load_raw(spec, uploads_dir, cache, kept_in)
    if check_raw is not None:
        check_raw(ds)
    ds = apply_column_mapping(ds, spec.columns)
    data_format = find_format(ds.column_names, method)
    fmt, required = data_format.name, data_format.columns
    missing = sorted(keep_columns - set(ds.column_names))
    if missing:
        raise ColumnsMismatch(
            [
                f"dataset: column {c!r} is needed by the rewards but the dataset has {', '.join(ds.column_names)}; "
                f"map a column to it in {MAPPING_NAME} ({c}=your_column)"
                for c in missing
            ]
        )
    ds = _as_text(ds, data_format.text_columns)
    ds = _as_labels(ds, data_format.labels)
    optional = set(support(method).optional_columns)
    if "tools" in optional and "tools" in ds.column_names:
        _check_tools(ds["tools"])
    kept = set(required) | set(keep_columns) | optional
    extra = [] if keep_all else [c for c in ds.column_names if c not in kept]
    if extra:
        ds = ds.remove_columns(extra)
    if spec.max_rows is not None and len(ds) > spec.max_rows:
        ds = ds.select(range(spec.max_rows))
    if len(ds) == 0:
        raise SpecError([EMPTY_DATASET])
    problems = []
    for column in required:
        blank_rows = [i for i, value in enumerate(ds[column]) if _blank(value)]
        if blank_rows:
            problems.append(
                f"dataset: {len(blank_rows)} of {len(ds)} rows have an empty {column!r} (first: row {blank_rows[0]}); "
                "fix or drop them"
            )
    if problems:
        raise SpecError(problems)
    return JobData(ds, fmt)


def _as_text(ds: Dataset, columns: tuple[str, ...]) -> Dataset:
    """Scalar (number, bool) columns the trainer reads as text, as strings: a CSV's ``answer`` of ``4`` loads as an
    integer, and the chat template and the preview concatenate text."""
    from datasets import Value

    for column in columns:
        feature = ds.features.get(column)
        if isinstance(feature, Value) and feature.dtype not in ("string", "large_string"):
            ds = ds.cast_column(column, Value("string"))
    return ds


def _as_labels(ds: Dataset, columns: tuple[str, ...]) -> Dataset:
    """Label columns as booleans: a CSV's ``true``/``false`` or ``1``/``0`` loads as text or numbers. A value that is
    none of these is refused by name."""
    from datasets import Value

    words = {"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False}
    for column in columns:
        if ds.features.get(column) == Value("bool"):
            continue
        bad = [i for i, v in enumerate(ds[column]) if v is not None and str(v).strip().lower() not in words]
        if bad:
            raise SpecError(
                [
                    f"dataset: column {column!r} must hold true or false; row {bad[0]} has "
                    f"{quote_input(ds[bad[0]][column])}"
                ]
            )
        ds = ds.map(lambda row, c=column: {c: None if row[c] is None else words[str(row[c]).strip().lower()]})
        ds = ds.cast_column(column, Value("bool"))
    return ds


def _check_tools(values: list) -> None:
    """A ``tools`` column holds each row's tool schemas as a list, or as JSON text that reads as one (TRL parses it
    while tokenizing; a row it cannot parse is refused here, by number, rather than failing the job there)."""
    for i, value in enumerate(values):
        try:
            schemas = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            schemas = "not JSON"
        if schemas is not None and not (isinstance(schemas, list) and all(isinstance(s, dict) for s in schemas)):
            raise SpecError(
                [
                    f"dataset: row {i} has a 'tools' value that is not a list of tool schemas (a JSON list, or JSON "
                    f"text of one): {quote_input(value)}"
                ]
            )


AUTO_HOLDOUT_MAX = 128  # the most rows ``eval.holdout_rows: auto`` holds out (a recipe's own count, as a cap)
AUTO_HOLDOUT_MIN_DATASET = 20  # fewer rows than this: auto holds none out (2 rows would make no verdict)


def auto_holdout_rows(total: int) -> int:
    """The held-out rows ``eval.holdout_rows: auto`` means for a dataset of ``total`` rows: a tenth of them, at least
    2 and at most ``AUTO_HOLDOUT_MAX``, and none for a dataset under ``AUTO_HOLDOUT_MIN_DATASET`` rows.

    >>> [auto_holdout_rows(n) for n in (1, 19, 20, 100, 1000, 50_000)]
    [0, 0, 2, 10, 100, 128]
    """
    if total < AUTO_HOLDOUT_MIN_DATASET:
        return 0
    return min(AUTO_HOLDOUT_MAX, max(2, total // 10))


def holdout_size(total: int, fraction: float, rows: int | str | None) -> int:
    """How many of ``total`` rows the before/after evaluation holds out: ``rows`` ("auto": by the dataset's size),
    else ``fraction`` of them.

    >>> holdout_size(100, 0.1, None), holdout_size(100, 0.1, 7), holdout_size(100, 0.0, None)
    (10, 7, 0)
    >>> holdout_size(1000, 0.0, "auto"), holdout_size(1, 0.0, "auto")
    (100, 0)
    """
    if rows == "auto":
        return auto_holdout_rows(total)
    return int(rows) if rows is not None else int(round(total * fraction))


def holdout_problem(total: int, fraction: float, rows: int | str | None) -> str | None:
    """Why the held-out rows leave nothing to train on, at the setting that asked for them and saying what to set
    instead; None when some rows are left.

    >>> holdout_problem(1, 0.0, 128)
    'eval.holdout_rows: holding out 128 rows leaves none of the 1 to train on; set it to 0 (no before/after evaluation)'
    >>> holdout_problem(100, 0.0, 100).split("; ")[1]
    'set it to 10 (or anything below 100), or to 0 for no before/after evaluation'
    >>> holdout_problem(100, 0.0, 99), holdout_problem(5, 0.0, "auto")
    (None, None)
    """
    n_eval = holdout_size(total, fraction, rows)
    if n_eval < total or n_eval <= 0:
        return None
    where = "eval.holdout_rows" if rows is not None else "eval.holdout_fraction"
    said = f"{where}: holding out {counted(n_eval, 'row')} leaves none of the {total:,} to train on"
    suggested = auto_holdout_rows(total)
    if suggested == 0:
        return f"{said}; set it to 0 (no before/after evaluation)"
    return f"{said}; set it to {suggested} (or anything below {total:,}), or to 0 for no before/after evaluation"


def split_holdout(ds: Dataset, fraction: float, rows: int | str | None, seed: int) -> tuple[Dataset, Dataset | None]:
    """Hold out rows for the before/after evaluation; the rest trains. None when nothing is held out."""
    n_eval = holdout_size(len(ds), fraction, rows)
    if n_eval <= 0:
        return ds, None
    problem = holdout_problem(len(ds), fraction, rows)
    if problem is not None:
        raise SpecError([problem])
    split = ds.train_test_split(test_size=n_eval, seed=seed, shuffle=True)
    return split["train"], split["test"]


def _blank(value) -> bool:
    return value is None or (isinstance(value, (str, list)) and len(value) == 0)
