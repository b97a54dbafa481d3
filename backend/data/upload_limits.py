"""Limits on what an uploaded file becomes once decoded, not only on its size on disk: rows, bytes, columns and the
nesting depth of a value, checked before the rows are built where the file says so (parquet metadata, JSON brackets,
compression magic) and on the rows after.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.spec import SpecError

if TYPE_CHECKING:
    from datasets import Dataset

MAX_ROWS = 2_000_000
MAX_DECODED_BYTES = 768 * 2**20
MAX_COLUMNS = 1_000
MAX_DEPTH = 32  # a chat row is 4 deep (messages -> message -> tool_calls -> call): 32 leaves room and stops bombs
LIMITS = ("MAX_ROWS", "MAX_DECODED_BYTES", "MAX_COLUMNS", "MAX_DEPTH")  # handed to the process that checks a file

# How each compression starts; a text upload that starts like this would be decoded without any limit.
_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
    b"\x04\x22\x4d\x18": "lz4",
}
_CHUNK = 4 * 2**20
DROP_COLUMNS = "keep only the columns training uses"


def _too_big(
    display: str, what: str, found: str, limit: str, advice: str = "use fewer or shorter rows, or a Hub dataset"
) -> SpecError:
    return SpecError([f"dataset: {display} {what} {found}, more than the {limit} an upload may have; {advice}"])


def compression(path: Path) -> str | None:
    """The compression a file's first bytes announce, or None.

    >>> import gzip, tempfile; f = Path(tempfile.mkdtemp()) / "x.jsonl"; _ = f.write_bytes(gzip.compress(b"{}"))
    >>> compression(f)
    'gzip'
    """
    with open(path, "rb") as fh:
        head = fh.read(8)
    return next((name for magic, name in _MAGIC.items() if head.startswith(magic)), None)


def json_depth(path: Path) -> int:
    """The deepest nesting of ``[`` and ``{`` in a JSON or JSONL file, outside strings, read in 4 MB chunks.

    >>> import tempfile; f = Path(tempfile.mkdtemp()) / "x.jsonl"
    >>> _ = f.write_text('{"a": [[1]], "b": "[[[[ not counted \\\\" ]]"}\\n{"c": {}}\\n')
    >>> json_depth(f)
    3
    """
    import numpy as np

    deepest = depth = 0
    in_string = False
    carry = b""
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            data = carry + chunk
            carry = b""
            if data.endswith(b"\\"):  # an escape cut in two: finish it with the next chunk
                data, carry = data[:-1], b"\\"
            data = data.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped quotes do not end a string
            raw = np.frombuffer(data, dtype=np.uint8)
            quotes = np.cumsum(raw == ord('"'), dtype=np.int32)
            outside = (quotes % 2 == 0) if not in_string else (quotes % 2 == 1)
            step = (
                np.isin(raw, (ord("["), ord("{"))).astype(np.int8) - np.isin(raw, (ord("]"), ord("}"))).astype(np.int8)
            ) * outside
            levels = depth + np.cumsum(step, dtype=np.int32)
            if levels.size:
                deepest = max(deepest, int(levels.max()))
                depth = int(levels[-1])
            in_string = in_string ^ bool(quotes[-1] % 2) if quotes.size else in_string
    return deepest


def _type_depth(arrow_type: Any) -> int:
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        return 1 + max((_type_depth(arrow_type.field(i).type) for i in range(arrow_type.num_fields)), default=0)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return 1 + _type_depth(arrow_type.value_type)
    if pa.types.is_map(arrow_type):
        return 1 + max(_type_depth(arrow_type.key_type), _type_depth(arrow_type.item_type))
    return 0


def before_decoding(path: Path, display: str) -> None:
    """Refuse (SpecError) a file whose own bytes say it would decode past the limits: compression under a text
    suffix, parquet metadata over the rows, bytes or columns, JSON nested deeper than ``MAX_DEPTH``."""
    suffix = path.suffix.lower()
    if suffix != ".parquet" and (kind := compression(path)) is not None:
        raise SpecError(
            [
                f"dataset: {display} is {kind}-compressed; upload the file itself, uncompressed (compressed "
                "data can swell far past the upload limit)"
            ]
        )
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            meta = pq.ParquetFile(path).metadata
        except Exception:  # noqa: BLE001 - not parquet at all: the loader says so in its own words
            return
        if meta.num_rows > MAX_ROWS:
            raise _too_big(display, "has", f"{meta.num_rows:,} rows", f"{MAX_ROWS:,}")
        if meta.num_columns > MAX_COLUMNS:
            raise _too_big(display, "has", f"{meta.num_columns:,} columns", f"{MAX_COLUMNS:,}", DROP_COLUMNS)
        # The metadata's sizes are of encoded pages: a dictionary of one long string repeated in every row is tiny
        # there and huge as rows. So decode a few rows at a time and count, stopping at the limit.
        decoded = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=64):
            decoded += sum(
                (c.dictionary_decode() if pa.types.is_dictionary(c.type) else c).nbytes for c in batch.columns
            )
            if decoded > MAX_DECODED_BYTES:
                raise _too_big(
                    display, "decodes to", f"over {MAX_DECODED_BYTES // 2**20} MB", f"{MAX_DECODED_BYTES // 2**20} MB"
                )
    elif suffix in (".json", ".jsonl") and (depth := json_depth(path)) > MAX_DEPTH:
        raise SpecError([f"dataset: {display} nests values {depth:,} levels deep; at most {MAX_DEPTH} are allowed"])


def after_decoding(dataset: Dataset, display: str) -> None:
    """Refuse (SpecError) rows past the limits once decoded: count, bytes, columns and nesting depth."""
    if len(dataset) > MAX_ROWS:
        raise _too_big(display, "has", f"{len(dataset):,} rows", f"{MAX_ROWS:,}")
    if dataset.data.nbytes > MAX_DECODED_BYTES:
        raise _too_big(
            display, "decodes to", f"{dataset.data.nbytes / 2**20:,.0f} MB", f"{MAX_DECODED_BYTES // 2**20} MB"
        )
    if len(dataset.column_names) > MAX_COLUMNS:
        raise _too_big(display, "has", f"{len(dataset.column_names):,} columns", f"{MAX_COLUMNS:,}", DROP_COLUMNS)
    depth = max((_type_depth(field.type) for field in dataset.data.schema), default=0)
    if depth > MAX_DEPTH:
        raise SpecError([f"dataset: {display} nests values {depth:,} levels deep; at most {MAX_DEPTH} are allowed"])
