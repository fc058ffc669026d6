"""``edgeq export``: a home server's journal as a date-partitioned Parquet dataset, incrementally,
from the store opened read-only. Layout and guarantees: docs/pipeline.md, "Export layout".
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from edgeq.store.journal import JOURNAL_COLUMNS, JournalEntry, JournalTx
from edgeq.store.opening import APPLICATION_ID, connect
from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal, PipelineError, require
from edgeq.sync.pipeline.export.layout import (  # the layout the job reads
    COLUMN_TYPES,
    CONTACT_TYPES,
    CONTACTS,
    MANIFEST,
    REQUIRED,
)

__all__ = [
    "EXPORT_FORMAT",
    "MANIFEST",
    "PRUNED_KEY",
    "ROW_GROUP_ROWS",
    "ExportResult",
    "Since",
    "arrow_schema",
    "check_same_journal",
    "export_journal",
    "known_skips",
    "last_journal_id",
    "open_store",
    "parse_since",
    "part_name",
    "pruned_record",
    "read_manifest",
    "skipped_condition",
]

#: Bumped if the Parquet layout ever changes incompatibly (docs/pipeline.md, "Schema").
EXPORT_FORMAT = 1
#: Rows per Parquet row group: one device's rows (sorted together) span few groups.
ROW_GROUP_ROWS = 16_384
#: The ``edgeq_meta`` key where ``edgeq export --prune-after`` records what it removed.
PRUNED_KEY = "journal.pruned"
_PART = re.compile(r"^part-(\d{12})-(\d{12})\.parquet$")
_DAY_MS = 86_400_000


def arrow_schema() -> Any:
    """The pyarrow schema of an exported part file (``date`` is the directory)."""
    import pyarrow as pa

    types = {"int64": pa.int64(), "string": pa.string()}
    return pa.schema([pa.field(name, types[kind], nullable=name not in REQUIRED)
                      for name, kind in COLUMN_TYPES.items()])


def part_name(first_id: int, last_id: int) -> str:
    """The file name of a batch's part file.

    >>> part_name(1, 4096)
    'part-000000000001-000000004096.parquet'
    """
    return f"part-{first_id:012d}-{last_id:012d}.parquet"


@dataclass(frozen=True, slots=True)
class Since:
    """Where an export starts: entries with ``id >= min_id`` and ``at_ms >= min_at_ms``."""

    min_id: int = 0
    min_at_ms: int | None = None


def parse_since(text: str | None) -> Since:
    """``--since``: a journal id or an ISO 8601 date/time (no zone: UTC).

    >>> parse_since("1200")
    Since(min_id=1200, min_at_ms=None)
    >>> parse_since("2025-11-21")
    Since(min_id=0, min_at_ms=1763683200000)
    """
    if text is None or text == "":
        return Since()
    text = text.strip()
    if text.isdigit():
        return Since(min_id=int(text))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise MalformedJournal(
            f"--since {text!r} is neither a journal id nor a date/time: give e.g. --since 1200, "
            "--since 2025-11-21 or --since 2025-11-21T08:00:00+00:00"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return Since(min_at_ms=int(when.timestamp() * 1000))


@dataclass(slots=True)
class ExportResult:
    """What a run exported; ``skipped``: entries left out by ``--since``; ``watermark``: the last id
    covered."""

    rows: int = 0
    skipped: int = 0
    first_id: int | None = None
    last_id: int | None = None
    watermark: int = 0
    files: list[Path] = field(default_factory=list)
    server: str = ""
    #: devices in the snapshot of device records written beside
    devices: int = 0


def open_store(db: Path) -> tuple[sqlite3.Connection, str]:
    """The store, read-only, checked to be an edgeq store with a journal; and its name."""
    if not db.exists():
        raise JournalNotFound(
            f"{db} does not exist: give the home server's store, e.g. edgeq export --db home.db")
    if not db.is_file():
        raise JournalNotFound(f"{db} is not a file: give the home server's store (its SQLite file)")
    try:
        conn = connect(db, read_only=True, timeout=30.0)
        (app_id,) = conn.execute("PRAGMA application_id").fetchone()
        has_journal = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'journal'"
        ).fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise MalformedJournal(
            f"{db} is not an edgeq store ({exc}): give the home server's store") from None
    if app_id != APPLICATION_ID:
        conn.close()
        raise MalformedJournal(f"{db} is not an edgeq store: give the home server's store")
    if not has_journal:
        conn.close()
        raise JournalNotFound(
            f"{db} has no journal (written by an edgeq older than schema 4): open it once with this "
            "edgeq, as QueueManager(..., journal='server'), so it records one"
        )
    side = conn.execute("SELECT value FROM edgeq_meta WHERE key = 'journal'").fetchone()
    if side is not None and side[0] == "device":
        conn.close()
        raise JournalNotFound(
            f"{db} is a device's store: its journal holds only the expiries not yet reported to "
            "its home server, which removes them once reported; export the home server's store "
            "(edgeq serve's --db)"
        )
    row = conn.execute("SELECT value FROM edgeq_meta WHERE key = 'name'").fetchone()
    return conn, str(row[0]) if row else ""


def read_manifest(out: Path) -> dict[str, Any]:
    """The export directory's manifest, checked (``{}``: nothing exported there yet)."""
    path = out / MANIFEST
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text("utf-8"))
        if not isinstance(manifest, dict) or not isinstance(manifest.get("watermark"), int):
            raise ValueError("no integer 'watermark'")
        if not all(_is_skip_range(r) for r in manifest.get("skipped", [])):
            raise ValueError("'skipped' is not a list of [first id, last id, at_ms bound or null]")
    except (ValueError, OSError) as exc:
        raise MalformedJournal(
            f"{path} is damaged ({exc}): export into a new directory, "
            "or delete the directory to start over"
        ) from None
    if manifest.get("format") != EXPORT_FORMAT:
        raise MalformedJournal(
            f"{out} was exported in format {manifest.get('format')!r}, "
            f"this edgeq writes {EXPORT_FORMAT}: export into a new directory"
        )
    return manifest


def _is_skip_range(value: object) -> bool:
    return (
        isinstance(value, list) and len(value) == 3
        and all(type(v) is int for v in value[:2]) and (value[2] is None or type(value[2]) is int)
    )


def skipped_condition(ranges: list[list[Any]]) -> tuple[str, list[int]]:
    """SQL and parameters true for a journal row in the manifest's ``skipped`` ranges.

    >>> skipped_condition([[1, 9, None], [10, 20, 1000]])
    ('((id BETWEEN ? AND ?) OR (id BETWEEN ? AND ? AND at_ms < ?))', [1, 9, 10, 20, 1000])
    """
    terms: list[str] = []
    params: list[int] = []
    for first, last, bound in ranges:
        terms.append("(id BETWEEN ? AND ?)" if bound is None else
                     "(id BETWEEN ? AND ? AND at_ms < ?)")
        params += [first, last] if bound is None else [first, last, bound]
    return (f"({' OR '.join(terms)})" if terms else "0"), params


def _skip(ranges: list[list[Any]], first: int, last: int, bound: int | None) -> None:
    """Record ids ``first..last`` as skipped (below ``bound``), extending the last range if it can."""
    if ranges and ranges[-1][2] == bound and ranges[-1][1] + 1 == first:
        ranges[-1][1] = last
    else:
        ranges.append([first, last, bound])


def known_skips(manifest: dict[str, Any], out: Path, conn: sqlite3.Connection) -> list[list[Any]]:
    """The manifest's ``skipped`` ranges; an older manifest has none: see docs/pipeline.md,
    "Retention"."""
    if "skipped" in manifest:
        return [list(r) for r in manifest["skipped"]]
    watermark = int(manifest.get("watermark", 0))
    if watermark == 0:
        return []
    import pyarrow.parquet as pq

    exported = sum(
        pq.ParquetFile(part).metadata.num_rows for part in out.glob("date=*/part-*.parquet")
        if (m := _PART.match(part.name)) is not None and int(m.group(2)) <= watermark
    )
    (held,) = conn.execute("SELECT count(*) FROM journal WHERE id <= ?", (watermark,)).fetchone()
    return [] if exported == held + int(pruned_record(conn).get("rows", 0)) else [[1, watermark, None]]


def check_same_journal(out: Path, conn: sqlite3.Connection, watermark: int, db: Path) -> None:
    """Refuse a store whose entry at the last exported id is not the one exported (restored)."""
    import pyarrow.parquet as pq

    parts = [(int(m.group(2)), part) for part in out.glob("date=*/part-*.parquet")
             if (m := _PART.match(part.name)) is not None and int(m.group(2)) <= watermark]
    if not parts:
        return
    newest = max(last for last, _ in parts)
    rows = [row for last, part in parts if last == newest
            for row in pq.read_table(part, columns=["id", "uid", "at_ms"]).to_pylist()]
    if not rows:
        return  # a batch --since left empty
    exported = max(rows, key=lambda r: r["id"])
    held = conn.execute("SELECT uid, at_ms FROM journal WHERE id = ?", (exported["id"],)).fetchone()
    if held is not None and tuple(held) != (exported["uid"], exported["at_ms"]):
        raise MalformedJournal(
            f"{db}'s journal entry {exported['id']} is not the one exported to {out} "
            f"(uid {held[0]}, not {exported['uid']}): the store was replaced or restored; "
            "export it into a new directory"
        )


def last_journal_id(conn: sqlite3.Connection) -> int:
    """The highest journal id the store ever issued (AUTOINCREMENT: even if retention removed all)."""
    last = JournalTx(conn).last_id()
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'journal'").fetchone()
    return max(last, int(row[0]) if row and isinstance(row[0], int) else 0)


def pruned_record(conn: sqlite3.Connection) -> dict[str, Any]:
    """What retention removed from this store so far (``{}``: nothing)."""
    row = conn.execute("SELECT value FROM edgeq_meta WHERE key = ?", (PRUNED_KEY,)).fetchone()
    try:
        record = json.loads(row[0]) if row else {}
    except (TypeError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", "utf-8")
    os.replace(tmp, out / MANIFEST)


def _clean_uncommitted(out: Path, watermark: int) -> int:
    """Delete what an interrupted run left: temporary files and part files above the watermark."""
    removed = 0
    for part in out.glob("date=*/*"):
        match = _PART.match(part.name)
        if part.name.startswith(".tmp-") or (match is not None and int(match.group(1)) > watermark):
            part.unlink()
            removed += 1
    return removed


def _day(at_ms: int) -> str:
    return date.fromordinal(date(1970, 1, 1).toordinal() + at_ms // _DAY_MS).isoformat()


def export_journal(
    db: Path,
    out: Path,
    *,
    since: Since | None = None,
    batch_rows: int = 100_000,
    progress: Callable[[str], None] | None = None,
) -> ExportResult:
    """Append the store's journal entries not yet in ``out`` to it."""
    require("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    if batch_rows < 1:
        raise MalformedJournal(f"batch_rows must be at least 1, not {batch_rows}")
    since = since or Since()
    say = progress or (lambda _text: None)
    conn, server = open_store(db)
    try:
        if out.exists() and not out.is_dir():
            raise MalformedJournal(
                f"{out} is a file: --out must be a directory (it is created if missing)")
        out.mkdir(parents=True, exist_ok=True)
        manifest = read_manifest(out)
        if manifest and manifest.get("server") not in ("", server):
            raise MalformedJournal(
                f"{out} holds the journal of queue manager {manifest.get('server')!r}, and {db} is "
                f"{server!r}: export each server into its own directory"
            )
        watermark = int(manifest.get("watermark", 0))
        last_in_store = last_journal_id(conn)
        if last_in_store < watermark:
            raise MalformedJournal(
                f"{out} already covers journal ids up to {watermark}, but {db} ends at "
                f"{last_in_store}: the store was replaced or restored; export it into a new directory"
            )
        check_same_journal(out, conn, watermark, db)
        cleaned = _clean_uncommitted(out, watermark)
        if cleaned:
            say(f"removed {cleaned} file(s) left by an interrupted export")
        pruned = int(pruned_record(conn).get("through_id", 0))
        if pruned > max(watermark, since.min_id - 1):
            say(f"note: journal ids up to {pruned} were pruned from {db.name} after an earlier export "
                "(edgeq export --prune-after): this directory will not hold the entries removed")
        result = ExportResult(watermark=watermark, server=server)
        after = max(watermark, since.min_id - 1)
        skipped = known_skips(manifest, out, conn)
        if after > watermark:  # ids below --since ID are passed by the watermark unexported
            _skip(skipped, watermark + 1, after, None)
        schema = arrow_schema()
        pending = last_in_store - after
        if pending > 0:
            say(f"exporting journal ids {after + 1}..{last_in_store} of {server or db.name}")
        while True:
            try:
                entries = JournalTx(conn).since(after, batch_rows)
            except sqlite3.Error as exc:
                raise PipelineError(f"reading the journal of {db} failed: {exc}") from exc
            if not entries:
                break
            batch_first, batch_last = entries[0].id, entries[-1].id
            kept = [e for e in entries if since.min_at_ms is None or e.at_ms >= since.min_at_ms]
            result.skipped += len(entries) - len(kept)
            if len(kept) < len(entries):
                _skip(skipped, batch_first, batch_last, since.min_at_ms)
            files = _write_batch(pa, pq, schema, out, kept, batch_first, batch_last)
            manifest = {
                "format": EXPORT_FORMAT,
                "server": server,
                "watermark": batch_last,
                "rows": int(manifest.get("rows", 0)) + len(kept),
                "skipped": skipped,
                "updated": datetime.now(UTC).isoformat(timespec="seconds"),
                "columns": list(JOURNAL_COLUMNS),
            }
            _write_manifest(out, manifest)  # the commit point of this batch
            result.files += files
            result.rows += len(kept)
            if kept:
                result.first_id = kept[0].id if result.first_id is None else result.first_id
                result.last_id = kept[-1].id
            result.watermark = after = batch_last
            if pending > 0:
                say(f"  {batch_last - (last_in_store - pending):,}/{pending:,} journal ids read, "
                    f"{result.rows:,} row(s) written")
        result.devices = _write_contacts(pa, pq, out, conn)
        return result
    finally:
        conn.close()


def _write_contacts(pa: Any, pq: Any, out: Path, conn: sqlite3.Connection) -> int:
    """Replace the export's snapshot of each device's last request; return how many devices."""
    try:
        known = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'devices'").fetchone()
        rows = [] if known is None else conn.execute(  # a store from before schema 5 knows no device
            "SELECT name, last_seen_ms FROM devices WHERE last_seen_ms IS NOT NULL ORDER BY name"
        ).fetchall()
    except sqlite3.Error as exc:
        raise PipelineError(f"reading the device records of the store failed: {exc}") from exc
    types = {"int64": pa.int64(), "string": pa.string()}
    schema = pa.schema([pa.field(name, types[kind], nullable=False)
                        for name, kind in CONTACT_TYPES.items()])
    table = pa.Table.from_pydict(
        {"device": [r[0] for r in rows], "last_seen_ms": [r[1] for r in rows]}, schema=schema)
    final = out / CONTACTS
    final.parent.mkdir(exist_ok=True)
    tmp = final.with_name(f".tmp-{final.name}")
    pq.write_table(table, tmp)
    os.replace(tmp, final)
    return len(rows)


def _write_batch(
    pa: Any, pq: Any, schema: Any, out: Path, entries: list[JournalEntry], first: int, last: int
) -> list[Path]:
    """Write one batch's part files (one per UTC date), each under a temporary name first."""
    by_day: dict[str, list[JournalEntry]] = {}
    for entry in entries:
        by_day.setdefault(_day(entry.at_ms), []).append(entry)
    written: list[tuple[Path, Path]] = []
    for day, rows in sorted(by_day.items()):
        columns = {name: [getattr(e, name) for e in rows] for name in JOURNAL_COLUMNS}
        table = pa.Table.from_pydict(columns, schema=schema).sort_by(
            [("origin", "ascending"), ("id", "ascending")])
        folder = out / f"date={day}"
        folder.mkdir(exist_ok=True)
        final = folder / part_name(first, last)
        tmp = folder / f".tmp-{final.name}"
        pq.write_table(table, tmp, compression="zstd", row_group_size=ROW_GROUP_ROWS)
        written.append((tmp, final))
    for tmp, final in written:
        os.replace(tmp, final)
    return [final for _, final in written]
