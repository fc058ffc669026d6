"""The store's schema and its migrations: :data:`MIGRATIONS` lists the steps to reach
:data:`SCHEMA_VERSION` (``PRAGMA user_version``), run in one transaction. Tables are declared
through sqlite-utils; partial indexes, which it cannot express, are plain SQL. What each table
holds: docs/storage.md, "Schema".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeq.store.integrity import CRC_SQL
from edgeq.store.opening import APPLICATION_ID
from edgeq.types import MessageState

if TYPE_CHECKING:  # imported where used: sqlite-utils is half of `import edgeq`'s time
    from sqlite_utils import Database

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]


def _v1(db: Database) -> None:
    db.table("edgeq_meta").create({"key": str, "value": str}, pk="key")
    db.table("edgeq_clock").create({"id": int, "stamp": int}, pk="id", not_null={"stamp"})
    db.table("queues").create(
        {
            "id": int,
            "name": str,
            "expiry_ms": int,
            "cap_expiry_ms": int,
            "max_depth": int,
            "max_message_bytes": int,
            "default_priority": int,
            "ordering": str,
            "created_ms": int,
            "depth": int,
        },
        pk="id",
        not_null={"name", "default_priority", "ordering", "created_ms", "depth"},
        defaults={"depth": 0},
    )
    db.table("queues").create_index(["name"], unique=True)
    db.table("messages").create(
        {
            "id": int,
            "queue_id": int,
            "origin": str,
            "stamp": int,
            "state": int,
            "confirm_id": int,
            "rank": int,
            "seq": int,
            "priority": int,
            "created_ms": int,
            "arrived_ms": int,
            "expiry_kind": int,
            "expiry_value": int,
            "cap_at": int,
            "deadline": int,
            "backout_count": int,
            "correlation_id": bytes,
            "reply_to": str,
            "fields": bytes,
            "data": bytes,
        },
        pk="id",
        foreign_keys=[("queue_id", "queues", "id")],
        not_null={
            "queue_id", "origin", "stamp", "state", "rank", "seq", "priority",
            "created_ms", "arrived_ms", "expiry_kind", "backout_count", "data",
        },
        defaults={"backout_count": 0},
    )
    db.execute("CREATE UNIQUE INDEX messages_uid ON messages (queue_id, origin, stamp)")
    # Only ready messages are candidates for get/browse, so only they are indexed
    # for it: locked rows never slow a get down.
    db.execute(
        "CREATE INDEX messages_ready ON messages (queue_id, rank DESC, seq) "
        f"WHERE state = {MessageState.READY:d}"
    )
    db.execute(
        "CREATE INDEX messages_deadline ON messages (queue_id, deadline) WHERE deadline IS NOT NULL"
    )
    db.execute(
        "CREATE INDEX messages_confirm ON messages (queue_id, confirm_id) WHERE confirm_id IS NOT NULL"
    )
    db.execute("INSERT INTO edgeq_clock (id, stamp) VALUES (1, 0)")


def _v2(db: Database) -> None:
    """Rules: persisted bindings, durable events, failures, counters; thresholds; reports."""
    db.execute("ALTER TABLE queues ADD COLUMN depth_threshold INTEGER")
    db.execute("ALTER TABLE messages ADD COLUMN report TEXT")
    db.table("rule_bindings").create(
        {"id": int, "queue_id": int, "position": int, "name": str, "config": str},
        pk="id",
        foreign_keys=[("queue_id", "queues", "id")],
        not_null={"queue_id", "position", "name", "config"},
    )
    db.execute("CREATE UNIQUE INDEX rule_bindings_order ON rule_bindings (queue_id, position)")
    # AUTOINCREMENT: an event id is never reused, so rules can deduplicate by it.
    db.execute(
        """CREATE TABLE rule_events (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               queue TEXT NOT NULL,
               kind TEXT NOT NULL,
               detail TEXT,
               at_ms INTEGER NOT NULL,
               message BLOB NOT NULL,
               delivered INTEGER NOT NULL DEFAULT 0)"""
    )
    db.execute("CREATE INDEX rule_events_pending ON rule_events (id) WHERE delivered = 0")
    db.table("rule_failures").create(
        {
            "event_id": int, "binding": str, "rule": str, "queue": str, "attempts": int,
            "last_error": str, "last_ms": int, "next_ms": int, "parked": int,
        },
        pk=("event_id", "binding"),
        not_null={"event_id", "binding", "rule", "queue", "attempts", "last_ms", "next_ms", "parked"},
    )
    db.table("queue_stats").create(
        {"queue": str, "counter": str, "value": int}, pk=("queue", "counter"), not_null={"value"}
    )
    db.table("stats_applied").create({"event_id": int}, pk="event_id")


def _v3(db: Database) -> None:
    """Sync: remote and home-server queue definitions; remembered confirmed uids."""
    db.execute("ALTER TABLE queues ADD COLUMN kind TEXT NOT NULL DEFAULT 'local'")
    for column in ("target_qmgr", "target_queue", "mode", "server"):
        db.execute(f"ALTER TABLE queues ADD COLUMN {column} TEXT")
    db.execute(
        """CREATE TABLE confirmed_uids (
               queue_id INTEGER NOT NULL REFERENCES queues(id),
               origin TEXT NOT NULL,
               stamp INTEGER NOT NULL,
               confirmed_ms INTEGER NOT NULL,
               PRIMARY KEY (queue_id, origin, stamp)) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX confirmed_uids_age ON confirmed_uids (confirmed_ms)")


def _v4(db: Database) -> None:
    """The journal: history for analytics (home server) or an outbox of expiries (device)."""
    db.execute(
        """CREATE TABLE journal (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               kind TEXT NOT NULL,
               side TEXT NOT NULL,
               at_ms INTEGER NOT NULL,
               queue TEXT NOT NULL,
               uid TEXT NOT NULL,
               origin TEXT NOT NULL,
               check_point TEXT,
               size INTEGER,
               created_ms INTEGER,
               arrived_ms INTEGER,
               confirmed_ms INTEGER,
               clock_offset_ms INTEGER,
               device TEXT)"""
    )
    # A device may report the same expiry twice (at-least-once): keep one.
    db.execute(
        "CREATE UNIQUE INDEX journal_device_expiry ON journal (uid, queue) "
        "WHERE kind = 'expired' AND side = 'device'"
    )


def _v5(db: Database) -> None:
    """Devices a home server knows: last contact, clock offset, public key, queues, revocation."""
    db.table("devices").create(
        {
            "name": str, "added_ms": int, "last_seen_ms": int, "clock_offset_ms": int, "agent": str,
            "public_key": bytes, "queues": str, "revoked_ms": int,
        },
        pk="name",
        not_null={"added_ms"},
    )


def _v6(db: Database) -> None:
    """Encryption at rest: a queue's cipher, each row's key, the quarantine."""
    db.execute("ALTER TABLE queues ADD COLUMN encryption TEXT")
    db.execute("ALTER TABLE messages ADD COLUMN key_id TEXT")
    db.table("quarantine").create(
        {"id": int, "queue": str, "uid": str, "at_ms": int, "reason": str, "row": bytes},
        pk="id",
        not_null={"queue", "uid", "at_ms", "reason", "row"},
    )


def _v7(db: Database) -> None:
    """Exactly-once without a time window: origins that settle their uids."""
    db.execute(
        """CREATE TABLE settled_origins (
               origin TEXT PRIMARY KEY,
               below INTEGER NOT NULL,
               updated_ms INTEGER NOT NULL) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX confirmed_uids_origin ON confirmed_uids (origin, stamp)")


def _v8(db: Database) -> None:
    """Row checksums, byte budgets, bounded refusals, put-locked messages by origin and age."""
    db.execute("ALTER TABLE messages ADD COLUMN crc INTEGER")
    db.execute(f"UPDATE messages SET crc = {CRC_SQL}")
    # Rule events recorded but not yet delivered carry copies of message rows: give
    # them their checksums too (a copy without one is never trusted). A blob that
    # does not decode is left as it is: it is read as damaged (edgeq.store.rules).
    import cbor2

    from edgeq.store.integrity import row_crc
    from edgeq.store.records import MessageRow

    for event_id, queue, blob in db.execute(
        "SELECT id, queue, message FROM rule_events"
    ).fetchall():
        try:
            values = list(cbor2.loads(blob))
            if not 18 <= len(values) <= 19:
                continue
            r = MessageRow(*values)  # an older row: no key id before v6, no crc before v8
            crc = row_crc(queue, r.origin, r.stamp, r.priority, r.created_ms, r.arrived_ms,
                          r.expiry_kind, r.expiry_value, r.cap_at, r.deadline, r.correlation_id,
                          r.reply_to, r.report, r.key_id, r.fields, r.data)
        except Exception:  # damaged before this migration: left for edgeq check
            continue
        db.execute(
            "UPDATE rule_events SET message = ? WHERE id = ?",
            (cbor2.dumps(list(r._replace(crc=crc))), event_id),
        )
    db.execute("ALTER TABLE queues ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE queues ADD COLUMN max_bytes INTEGER")
    db.execute("ALTER TABLE queues ADD COLUMN on_full TEXT NOT NULL DEFAULT 'reject'")
    db.execute("ALTER TABLE queues ADD COLUMN refusal_limit INTEGER")
    db.execute(
        "UPDATE queues SET bytes = (SELECT ifnull(sum(length(data) + ifnull(length(fields), 0)), 0) "
        "FROM messages WHERE messages.queue_id = queues.id)"
    )
    db.execute(
        "CREATE INDEX messages_put_locked ON messages (origin, arrived_ms) "
        f"WHERE state = {MessageState.PUT_LOCKED:d}"
    )
    db.execute(
        """CREATE TABLE refusals (
               queue_id INTEGER NOT NULL REFERENCES queues(id),
               origin TEXT NOT NULL,
               stamp INTEGER NOT NULL,
               count INTEGER NOT NULL,
               last_reason TEXT NOT NULL,
               last_ms INTEGER NOT NULL,
               PRIMARY KEY (queue_id, origin, stamp)) WITHOUT ROWID"""
    )


def _v9(db: Database) -> None:
    """Backout thresholds, compression, and remote administration (replies, keys, requests)."""
    db.execute("ALTER TABLE queues ADD COLUMN backout_threshold INTEGER")
    db.execute("ALTER TABLE queues ADD COLUMN backout_queue TEXT")
    db.execute("ALTER TABLE queues ADD COLUMN compression TEXT")
    db.execute(
        """CREATE TABLE admin_replies (
               request_id TEXT PRIMARY KEY,
               executed_ms INTEGER NOT NULL,
               reply BLOB NOT NULL) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX admin_replies_age ON admin_replies (executed_ms)")
    db.execute(
        """CREATE TABLE admin_keys (
               key_id TEXT PRIMARY KEY,
               public_key BLOB NOT NULL,
               actions TEXT NOT NULL,
               added_ms INTEGER NOT NULL) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE admin_requests (
               request_id TEXT PRIMARY KEY,
               device TEXT NOT NULL,
               action TEXT NOT NULL,
               target TEXT,
               request BLOB NOT NULL,
               created_ms INTEGER NOT NULL,
               expires_ms INTEGER,
               replied_ms INTEGER,
               rc TEXT,
               reply BLOB) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX admin_requests_device ON admin_requests (device, created_ms)")
    db.execute(
        "CREATE INDEX admin_requests_pending ON admin_requests (created_ms) WHERE replied_ms IS NULL"
    )


def _v10(db: Database) -> None:
    """Redelivery delays: a message backed out is not got again before ``not_before``."""
    db.execute("ALTER TABLE messages ADD COLUMN not_before INTEGER")
    db.execute("ALTER TABLE queues ADD COLUMN redelivery_delay_ms INTEGER NOT NULL DEFAULT 1000")
    db.execute(
        "ALTER TABLE queues ADD COLUMN max_redelivery_delay_ms INTEGER NOT NULL DEFAULT 300000"
    )
    db.execute(
        "CREATE INDEX messages_delayed ON messages (queue_id, not_before) WHERE not_before IS NOT NULL"
    )
    # The ready index carries not_before too, so a get passes a delayed message by on the
    # index entry alone, without reading its row (about 4x cheaper per message passed).
    db.execute("DROP INDEX messages_ready")
    db.execute(
        f"CREATE INDEX messages_ready ON messages (queue_id, rank DESC, seq, not_before) "
        f"WHERE state = {MessageState.READY:d}"
    )


def _v11(db: Database) -> None:
    """A device's dead-lettering (or discard) reported twice is kept once, as its expiries."""
    db.execute(
        "CREATE UNIQUE INDEX journal_device_dead_letter ON journal (kind, uid, queue) "
        "WHERE kind IN ('dead-lettered', 'discarded') AND side = 'device'"
    )


def _v12(db: Database) -> None:
    """What a home server refused, per device, queue and reason (a row per key)."""
    db.execute(
        """CREATE TABLE device_refusals (
               device TEXT NOT NULL,
               queue TEXT NOT NULL,
               reason TEXT NOT NULL,
               count INTEGER NOT NULL,
               first_ms INTEGER NOT NULL,
               last_ms INTEGER NOT NULL,
               last_detail TEXT NOT NULL,
               PRIMARY KEY (device, queue, reason)) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX device_refusals_recent ON device_refusals (last_ms)")


def _v13(db: Database) -> None:
    """When a pull first handed an admin request over; an older one counts as handed over unless
    its message still waits, never got, on ``<device>.SYSTEM.ADMIN``."""
    db.execute("ALTER TABLE admin_requests ADD COLUMN delivered_ms INTEGER")
    db.execute(  # the waiting messages read once (a set), not once per request
        "UPDATE admin_requests SET delivered_ms = created_ms WHERE replied_ms IS NULL "
        "AND (device || '.SYSTEM.ADMIN', request_id) NOT IN "
        "(SELECT q.name, lower(hex(m.correlation_id)) "
        "FROM queues q CROSS JOIN messages m ON m.queue_id = q.id WHERE q.name LIKE '%.SYSTEM.ADMIN' "
        f"AND m.state = {MessageState.READY:d} AND m.backout_count = 0 AND m.correlation_id IS NOT NULL)"
    )


def _v14(db: Database) -> None:
    """The management API's tokens (a secret's sha256, never the secret) and its record of actions."""
    db.execute(
        """CREATE TABLE api_tokens (
               id TEXT PRIMARY KEY,
               name TEXT NOT NULL UNIQUE,
               role TEXT NOT NULL,
               digest TEXT NOT NULL,
               created_ms INTEGER NOT NULL,
               revoked_ms INTEGER) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE api_actions (
               id INTEGER PRIMARY KEY,
               at_ms INTEGER NOT NULL,
               who TEXT NOT NULL,
               role TEXT NOT NULL,
               action TEXT NOT NULL,
               target TEXT NOT NULL,
               outcome TEXT NOT NULL,
               detail TEXT NOT NULL)"""
    )


def _v15(db: Database) -> None:
    """The backlog each device last reported pushing, per queue (a row per device and queue)."""
    db.execute(
        """CREATE TABLE device_backlogs (
               device TEXT NOT NULL,
               queue TEXT NOT NULL,
               messages INTEGER NOT NULL,
               reported_ms INTEGER NOT NULL,
               PRIMARY KEY (device, queue)) WITHOUT ROWID"""
    )


MIGRATIONS: list[Callable[[Database], None]] = [
    _v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11, _v12, _v13, _v14, _v15,
]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema on ``conn`` up to :data:`SCHEMA_VERSION`; return the version found. In
    ``BEGIN IMMEDIATE``, so two processes opening a new file cannot both create it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if found < SCHEMA_VERSION:
            from sqlite_utils import Database

            db = Database(conn, execute_plugins=False)
            for step in MIGRATIONS[found:]:
                step(db)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return found
