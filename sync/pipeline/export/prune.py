"""``edgeq export --prune-after 30d``: journal retention on the home server, removing the entries that
are both exported and old, in short batches. See docs/pipeline.md, 'Retention: --prune-after'."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from edgeq.store.connection import ConnectionFactory
from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal
from edgeq.sync.pipeline.export.exporter import (
    PRUNED_KEY,
    check_same_journal,
    known_skips,
    open_store,
    pruned_record,
    read_manifest,
    skipped_condition,
)

__all__ = ["PruneResult", "prune_journal"]


@dataclass(slots=True)
class PruneResult:
    """What a prune removed (exported entries older than ``before_ms``) and what it kept, and why."""

    before_ms: int
    watermark: int
    removed: int = 0
    first_id: int | None = None
    last_id: int | None = None
    batches: int = 0
    kept_recent: int = 0
    kept_skipped: int = 0
    kept_unexported: int = 0

    def describe(self, db: Path) -> str:
        """One line for people.

        >>> result = PruneResult(before_ms=0, watermark=9, removed=3, first_id=1, last_id=3)
        >>> print(result.describe(Path("h.db")))  # doctest: +NORMALIZE_WHITESPACE
        Pruned 3 journal entries (ids 1..3, exported, before 1970-01-01T00:00:00Z) from h.db;
        kept 0 newer, 0 left out by --since, 0 not exported yet.
        """
        when = datetime.fromtimestamp(self.before_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        what = (f"Pruned {self.removed:,} journal entries (ids {self.first_id}..{self.last_id}, exported, "
                f"before {when})" if self.removed
                else f"Pruned nothing (no exported journal entry before {when})")
        return (f"{what} from {db}; kept {self.kept_recent:,} newer, "
                f"{self.kept_skipped:,} left out by --since, "
                f"{self.kept_unexported:,} not exported yet.")


def prune_journal(
    db: Path,
    out: Path,
    *,
    older_than_ms: int,
    now_ms: int | None = None,
    batch_rows: int = 10_000,
    timeout: float = 30.0,
    progress: Callable[[str], None] | None = None,
) -> PruneResult:
    """Remove from ``db``'s journal the entries exported into ``out`` (``edgeq export``'s directory of
    this store) older than ``older_than_ms``, at most ``batch_rows`` per transaction."""
    if older_than_ms < 0:
        raise MalformedJournal(f"the retention bound must not be negative, not {older_than_ms} ms")
    if batch_rows < 1:
        raise MalformedJournal(f"batch_rows must be at least 1, not {batch_rows}")
    say = progress or (lambda _text: None)
    before_ms = (int(time.time() * 1000) if now_ms is None else now_ms) - older_than_ms
    manifest = read_manifest(out) if out.is_dir() else {}
    if not manifest:
        raise JournalNotFound(
            f"nothing has been exported to {out}: pruning removes only exported journal entries; "
            f"run edgeq export --db {db} --out {out} first"
        )
    conn, server = open_store(db)
    try:
        if manifest.get("server") not in ("", server):
            raise MalformedJournal(
                f"{out} holds the journal of queue manager {manifest.get('server')!r}, not of {db} "
                f"({server!r}): prune a store against its own export directory"
            )
        check_same_journal(out, conn, int(manifest["watermark"]), db)
        skipped_sql, skipped_params = skipped_condition(known_skips(manifest, out, conn))
    finally:
        conn.close()
    result = PruneResult(before_ms=before_ms, watermark=int(manifest["watermark"]))
    # Exported (at or below the watermark, not skipped by --since) and old: the only rows removed.
    removable = f"id > ? AND id <= ? AND at_ms < ? AND NOT {skipped_sql}"
    say(f"pruning exported journal entries (ids up to {result.watermark}) before "
        f"{datetime.fromtimestamp(before_ms / 1000, UTC).isoformat(timespec='seconds')}")
    store = ConnectionFactory(db, timeout=timeout)
    try:
        after = 0
        while True:
            with store.write() as tx:
                params = [after, result.watermark, before_ms, *skipped_params]
                count, first, upto = tx.execute(
                    "SELECT count(*), min(id), max(id) FROM "
                    f"(SELECT id FROM journal WHERE {removable} ORDER BY id LIMIT ?)",
                    [*params, batch_rows],
                ).fetchone()
                if count == 0:
                    break
                removed = tx.execute(
                    f"DELETE FROM journal WHERE id <= ? AND {removable}", [upto, *params]
                ).rowcount
                record = pruned_record(tx)
                record.update(through_id=max(int(record.get("through_id", 0)), upto), before_ms=before_ms,
                              rows=int(record.get("rows", 0)) + removed, at_ms=before_ms + older_than_ms)
                tx.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                           "SET value = excluded.value", (PRUNED_KEY, json.dumps(record, sort_keys=True)))
            result.first_id = first if result.first_id is None else result.first_id
            result.removed += removed
            result.batches += 1
            result.last_id = after = upto
            say(f"  pruned {result.removed:,} journal entries so far (through id {upto})")
        with store.read() as tx:
            result.kept_recent, result.kept_skipped, result.kept_unexported = tx.execute(
                f"SELECT count(*) FILTER (WHERE id <= ? AND at_ms >= ? AND NOT {skipped_sql}), "
                f"count(*) FILTER (WHERE id <= ? AND {skipped_sql}), "
                "count(*) FILTER (WHERE id > ?) FROM journal",
                [result.watermark, before_ms, *skipped_params,
                 result.watermark, *skipped_params, result.watermark],
            ).fetchone()
    finally:
        store.close()
    return result
