"""Rows read straight off the table leaf pages of a SQLite file, for rows a damaged interior page hides from SQLite.

A damaged interior page of a table's b-tree takes every leaf below it out of SQLite's reach, though those leaves are
whole. This reads the file page by page (the file format: https://www.sqlite.org/fileformat2.html), decodes each
table leaf's cells (overflow chains followed) into (rowid, values), and leaves out the pages on the freelist, whose
rows were deleted. Which table a row belongs to is the caller's to judge.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_TABLE_LEAF = 0x0D


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    """SQLite's big-endian varint at ``at``: (value, where the next field starts). IndexError past the end.

    >>> _varint(bytes([0x81, 0x00]), 0), _varint(bytes([0x7F]), 0)
    ((128, 2), (127, 1))
    """
    value = 0
    for i in range(8):
        byte = buf[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | buf[at + 8], at + 9


def decode_record(payload: bytes) -> list[Any] | None:
    """The values of a record (SQLite's row format), or None when the bytes are not a well-formed one.

    >>> decode_record(bytes([4, 0, 1, 0x17]) + bytes([7]) + b"hello")
    [None, 7, 'hello']
    """
    try:
        header_size, at = _varint(payload, 0)
        kinds = []
        while at < header_size:
            kind, at = _varint(payload, at)
            kinds.append(kind)
        if at != header_size:
            return None
        values: list[Any] = []
        for kind in kinds:
            if kind == 0:
                values.append(None)
            elif 1 <= kind <= 6:
                width = (1, 2, 3, 4, 6, 8)[kind - 1]
                values.append(int.from_bytes(payload[at : at + width], "big", signed=True))
                at += width
            elif kind == 7:
                values.append(struct.unpack(">d", payload[at : at + 8])[0])
                at += 8
            elif kind in (8, 9):
                values.append(kind - 8)
            elif kind >= 12:
                width = (kind - 12) // 2
                chunk = payload[at : at + width]
                values.append(chunk.decode("utf-8") if kind % 2 else chunk)
                at += width
            else:
                return None
            if at > len(payload):
                return None
        return values if at == len(payload) else None
    except (IndexError, UnicodeDecodeError, struct.error):
        return None


class PageFile:
    """A SQLite file read as pages (page size and reserved bytes from its header)."""

    def __init__(self, path: Path):
        self.data = path.read_bytes()
        size = int.from_bytes(self.data[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        if self.page_size < 512 or self.page_size & (self.page_size - 1):
            raise ValueError(f"page size {self.page_size} in the header is not one SQLite writes")
        self.usable = self.page_size - self.data[20]
        self.pages = len(self.data) // self.page_size

    def page(self, number: int) -> bytes:
        """Page ``number`` (1-based), empty past the end."""
        return self.data[(number - 1) * self.page_size : number * self.page_size]

    def freelist(self) -> set[int]:
        """The pages on the freelist (trunks and leaves), as far as its chain can be followed."""
        free: set[int] = set()
        trunk = int.from_bytes(self.data[32:36], "big")
        while 1 < trunk <= self.pages and trunk not in free:
            free.add(trunk)
            page = self.page(trunk)
            count = min(int.from_bytes(page[4:8], "big"), (self.usable - 8) // 4)
            free.update(int.from_bytes(page[8 + 4 * i : 12 + 4 * i], "big") for i in range(count))
            trunk = int.from_bytes(page[0:4], "big")
        return free

    def _payload(self, page: bytes, at: int) -> tuple[int, bytes] | None:
        """(rowid, payload) of the table leaf cell at offset ``at``, its overflow chain followed."""
        size, at = _varint(page, at)
        rowid, at = _varint(page, at)
        if rowid >= 1 << 63:
            rowid -= 1 << 64
        limit = self.usable - 35
        if size <= limit:
            return rowid, page[at : at + size]
        least = (self.usable - 12) * 32 // 255 - 23
        local = least + (size - least) % (self.usable - 4)
        local = local if local <= limit else least
        chunks = [page[at : at + local]]
        got, next_page, seen = local, int.from_bytes(page[at + local : at + local + 4], "big"), set()
        while got < size:
            if not 1 < next_page <= self.pages or next_page in seen:
                return None
            seen.add(next_page)
            overflow = self.page(next_page)
            chunk = overflow[4 : 4 + min(self.usable - 4, size - got)]
            chunks.append(chunk)
            got += len(chunk)
            next_page = int.from_bytes(overflow[0:4], "big")
        return rowid, b"".join(chunks)

    def table_leaves(self) -> Iterator[int]:
        """The numbers of the table leaf pages but the first and those on the freelist."""
        free = self.freelist()
        for number in range(2, self.pages + 1):
            if number not in free and self.data[(number - 1) * self.page_size] == _TABLE_LEAF:
                yield number

    def leaf_rows(self, number: int) -> Iterator[tuple[int, list[Any]]]:
        """(rowid, values) of each cell of the table leaf page ``number`` that decodes."""
        page = self.page(number)
        cells = int.from_bytes(page[3:5], "big")
        if not 0 < cells <= (self.usable - 8) // 2:
            return
        for i in range(cells):
            offset = int.from_bytes(page[8 + 2 * i : 10 + 2 * i], "big")
            if not 8 <= offset < self.usable:
                continue
            try:
                cell = self._payload(page, offset)
            except IndexError:
                continue
            values = decode_record(cell[1]) if cell else None
            if cell and values is not None:
                yield cell[0], values
