"""The exported journal's layout as the Spark job reads it: columns and types (as
``edgeq.store.journal.JOURNAL_COLUMNS``, test-checked), manifest and part file names. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["COLUMN_TYPES", "CONTACTS", "CONTACT_TYPES", "MANIFEST", "REQUIRED", "Part", "parse_part"]

#: The manifest file in the export directory (ignored by Spark: it starts with ``_``).
MANIFEST = "_edgeq_export.json"
#: The server's device records as of the last export (each device's last request), replaced
#: by every ``edgeq export``: not journal rows (a request leaves none unless it changed something).
#: In a directory of its own whose name starts with ``_``, which readers of the journal's
#: partitions skip; the file's own name does not (Spark would skip it even when named).
CONTACTS = "_edgeq_devices/devices.parquet"
#: Parquet type of each of its columns.
CONTACT_TYPES: dict[str, str] = {"device": "string", "last_seen_ms": "int64"}

#: Parquet type of each journal column (``int64`` or ``string``), in the journal's order.
COLUMN_TYPES: dict[str, str] = {
    "id": "int64", "kind": "string", "side": "string", "at_ms": "int64", "queue": "string",
    "uid": "string", "origin": "string", "check_point": "string", "size": "int64",
    "created_ms": "int64", "arrived_ms": "int64", "confirmed_ms": "int64",
    "clock_offset_ms": "int64", "device": "string",
}

#: Columns that are never null.
REQUIRED: tuple[str, ...] = ("id", "kind", "side", "at_ms", "queue", "uid", "origin")

_PART = re.compile(r"^part-(\d{12})-(\d{12})\.parquet$")
_DATE = re.compile(r"^date=\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True, slots=True, order=True)
class Part:
    """One part file of an export, ``date=YYYY-MM-DD/part-FIRST-LAST.parquet``, and its size in bytes."""

    first: int
    last: int
    name: str  # relative to the export directory: date=.../part-....parquet
    size: int


def parse_part(relative: str, size: int) -> Part | None:
    """The :class:`Part` a path relative to the export directory names, or None if it is not a
    committed part file (e.g. an export's hidden temporary file).

    >>> parse_part("date=2025-11-21/part-000000000001-000000004096.parquet", 10)
    Part(first=1, last=4096, name='date=2025-11-21/part-000000000001-000000004096.parquet', size=10)
    >>> parse_part("date=2025-11-21/.tmp-part-000000000001-000000004096.parquet", 10) is None
    True
    """
    folder, _, file = relative.rpartition("/")
    match = _PART.match(file)
    if match is None or not _DATE.match(folder):
        return None
    return Part(int(match.group(1)), int(match.group(2)), relative, size)
