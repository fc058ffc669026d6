"""The sealer: seals and opens the rows of a queue manager's encrypted queues, and re-seals
them under a new key (docs/security.md, "Encryption at rest")."""

from __future__ import annotations

import base64
import binascii
import logging
from pathlib import Path

from edgeq.args import check_positive
from edgeq.crypto import CIPHERS, ENV_KEY_FILE, IntegrityError, KeyMissing, StoreKeys
from edgeq.errors import InvalidArgument, StoreError
from edgeq.events.sink import EventSink
from edgeq.queues.attributes import require_queue
from edgeq.results import QuarantineEntry
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.store.records import MessageRow, NewMessage, QueueRow, is_intact
from edgeq.store.tx import Tx
from edgeq.store.verify import stripped

__all__ = ["Sealer"]

log = logging.getLogger("edgeq")


class Sealer:
    """Seals and opens rows with the key ring ``keys`` (None: no encrypted queue can be used)."""

    def __init__(self, qm_name: str, keys: StoreKeys | None, default_encryption: str | None) -> None:
        if default_encryption is not None and default_encryption not in CIPHERS:
            raise InvalidArgument(f"default_encryption must be one of {', '.join(CIPHERS)} or None")
        self.qm_name = qm_name
        self.keys = keys
        self.default_encryption = default_encryption

    def check_keys(self, db: ConnectionFactory, path: Path) -> None:
        """Refuse a key ring whose keys are not this store's (by the check value kept per key id)."""
        if self.keys is None:
            return
        keys = self.keys
        with db.write() as conn:
            for key_id in keys.ids:
                key = f"keycheck.{key_id}"
                row = conn.execute("SELECT value FROM edgeq_meta WHERE key = ?", (key,)).fetchone()
                if row is None:
                    value = base64.b64encode(keys.check_value(key_id)).decode()
                    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES (?, ?)", (key, value))
                elif not keys.verify(key_id, _check_value(row[0], key_id, path)):
                    raise StoreError(
                        f"{path}: store key {key_id!r} is not the key this store was encrypted with (or the "
                        "store's check value for it is damaged: `edgeq check` tells): use the right key file "
                        "(nothing was changed)"
                    )

    def cipher(self, encryption: str | None) -> str | None:
        """The cipher a new queue gets (its own, else the default), checked against the key ring."""
        cipher = encryption if encryption is not None else self.default_encryption
        if cipher is not None and cipher not in CIPHERS:
            raise InvalidArgument(f"encryption must be one of {', '.join(CIPHERS)} (or None), not {cipher!r}")
        if cipher is not None and self.keys is None:
            raise KeyMissing(
                "an encrypted queue needs a store key: make one with "
                "`edgeq keys new-store-key --out store.key` "
                f"and open the store with keys='store.key' (or ${ENV_KEY_FILE})"
            )
        return cipher

    @staticmethod
    def damaged(queue: str, row: MessageRow) -> IntegrityError:
        """The error for ``row`` of ``queue``, which failed its check and was quarantined."""
        return IntegrityError(
            f"message {row.origin}.{row.stamp} on queue {queue!r}: the store is damaged (the message's "
            "checksum does not match: a flipped bit on the medium); it was moved to the quarantine "
            "(qm.quarantined(), its rules see it removed as 'quarantined'). Run `edgeq check --db PATH` "
            "to look for more damage"
        )

    @classmethod
    def verify(cls, queue: str, row: MessageRow) -> None:
        """Raise :class:`IntegrityError` if ``row``, read for ``queue``, fails its checksum."""
        if not is_intact(queue, row):
            raise cls.damaged(queue, row)

    def unseal(self, queue: str, row: MessageRow) -> MessageRow:
        """The row, checked against its checksum, with its data and fields in clear."""
        self.verify(queue, row)
        return self.unseal_checked(queue, row)

    def unseal_checked(self, queue: str, row: MessageRow) -> MessageRow:
        """The row, already checked against its checksum, decrypted (or :class:`IntegrityError`)."""
        if row.key_id is None:
            return row
        if self.keys is None:
            raise KeyMissing(
                f"queue {queue!r} is encrypted: open the store with its key file "
                f"(QueueManager(..., keys='store.key'), or ${ENV_KEY_FILE})"
            )
        uid = f"{row.origin}.{row.stamp}"
        data = self.keys.open(row.key_id, row.data, self.qm_name, queue, uid, "data")
        fields = None if row.fields is None else self.keys.open(
            row.key_id, row.fields, self.qm_name, queue, uid, "fields"
        )
        return row._replace(data=data, fields=fields, key_id=None)

    def unseal_for_rules(self, queue: str, row: MessageRow) -> MessageRow:
        """For a rule's copy: unsealed if possible, else without its data and fields (and if it fails
        its checksum, with only its uid); a quarantined message's copy is passed on as it is."""
        if row.crc is None and not row.data and row.fields is None:
            return row
        try:
            return self.unseal(queue, row)
        except StoreError as exc:
            log.warning(
                "a rule gets message %s.%s of queue %s without its data: %s",
                row.origin, row.stamp, queue, exc,
            )
            if is_intact(queue, row):
                return row._replace(data=b"", fields=None, key_id=None)
            return stripped(row) or row._replace(data=b"", fields=None, key_id=None, priority=0)

    def seal(self, q: QueueRow, row: NewMessage) -> NewMessage:
        """The row to insert on queue ``q``: sealed if the queue is encrypted."""
        if q.encryption is None:
            return row
        key_id, data, fields = self.seal_parts(q.name, row.origin, row.stamp, row.data, row.fields)
        return row._replace(data=data, fields=fields, key_id=key_id)

    def seal_parts(
        self, queue: str, origin: str, stamp: int, data: bytes, fields: bytes | None
    ) -> tuple[str, bytes, bytes | None]:
        """(key id, sealed data, sealed fields) under the current store key."""
        if self.keys is None:
            raise KeyMissing(
                f"queue {queue!r} is encrypted: open the store with its key file to put messages on it "
                f"(QueueManager(..., keys='store.key'), or ${ENV_KEY_FILE})"
            )
        uid = f"{origin}.{stamp}"
        key_id, sealed = self.keys.seal(data, self.qm_name, queue, uid, "data")
        sealed_fields = None if fields is None else self.keys.seal(
            fields, self.qm_name, queue, uid, "fields"
        )[1]
        return key_id, sealed, sealed_fields

    def rotate_keys(self, sink: EventSink, queue: str | None = None, *, batch: int = 500) -> int:
        """Re-seal under the current key every row of the encrypted queues (or ``queue``) sealed with
        another; return how many. One transaction per ``batch`` rows: queues stay in use."""
        batch = check_positive(batch, "batch")
        if self.keys is None:
            raise KeyMissing(
                f"rotating needs the store key ring: open the store with keys=... (or ${ENV_KEY_FILE})"
            )
        keys = self.keys
        names = [queue] if queue is not None else [q.name for q in self._encrypted_queues(sink)]
        total = 0
        for name in names:
            while True:
                now = sink.clock()
                with sink.write() as tx:
                    q = require_queue(tx, self.qm_name, name)
                    rows = tx.stale_sealed(q.id, keys.current, batch) if q.encryption else []
                    resealed, events = [], []
                    for row in rows:
                        if not is_intact(name, row):
                            # (or raises, if it is the index that is damaged)
                            events += sink.quarantine(tx, q, row, now, through_index=True)
                            continue
                        try:
                            opened = self.unseal_checked(name, row)
                        except IntegrityError:  # intact, yet it does not open: tampered, quarantined whole
                            events += sink.quarantine(tx, q, row, now)
                            continue
                        key_id, data, fields = self.seal_parts(
                            name, row.origin, row.stamp, opened.data, opened.fields
                        )
                        resealed.append((fields, data, key_id, row.id))
                    tx.reseal(resealed)
                    sink.record(tx, events)
                sink.dispatch(events)
                total += len(resealed)
                if len(rows) < batch:
                    break
        return total

    def quarantined(self, db: ConnectionFactory) -> list[QuarantineEntry]:
        """Rows moved to the quarantine because they failed their integrity check."""
        with db.read() as conn:
            return [QuarantineEntry(*row) for row in Tx(conn).quarantined()]

    @staticmethod
    def _encrypted_queues(sink: EventSink) -> list[QueueRow]:
        with sink.db.read() as conn:
            return [q for q in Tx(conn).queues() if q.encryption]


def _check_value(stored: object, key_id: str, path: Path) -> bytes:
    """A key's check value as stored (base64), or the damaged-store error."""
    try:
        if not isinstance(stored, str):
            raise ValueError(f"a {type(stored).__name__}, not text")
        return base64.b64decode(stored, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise damaged(
            f"the check value of store key {key_id!r} is unreadable ({exc})", path=str(path)
        ) from exc
