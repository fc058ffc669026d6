"""Home-server administration: the journal, devices, and encryption keys at rest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgeq.crypto import ENV_KEY_FILE, IntegrityError, KeyMissing
from edgeq.devices import DeviceRecord, DeviceTx
from edgeq.errors import (
    DeviceNotFound,
    InvalidArgument,
    InvalidType,
)
from edgeq.journal import JournalEntry, JournalTx, RemoteExpiryResult, entry_row, remote_expiry_refusal
from edgeq.names import check_name
from edgeq.results import QuarantineEntry
from edgeq.store import Tx

if TYPE_CHECKING:

    pass

from edgeq.qm_base import (
    QueueManagerBase,
    _check_count,
)

__all__ = ["AdminMixin"]


class AdminMixin(QueueManagerBase):
    """A home server's journal and device registry, and the store's encryption keys."""

    def journal_since(self, after_id: int = 0, limit: int = 10_000) -> list[JournalEntry]:
        """Journal entries with an id above ``after_id``, oldest first (at most ``limit``).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME", journal="server")
        >>> qm.define_queue("Q"); uid = qm.put("Q", Message(b"x"), confirm_id=1); qm.confirm_put("Q", uid)
        >>> [(e.kind, e.uid == str(uid)) for e in qm.journal_since()]
        [('accepted', True)]
        >>> qm.close()
        """
        if isinstance(after_id, bool) or not isinstance(after_id, int) or after_id < 0:
            raise InvalidArgument(f"after_id must be a non-negative int, not {after_id!r}")
        limit = _check_count(limit)
        with self._db.read() as conn:
            return JournalTx(conn).since(after_id, limit)

    def journal_trim(self, up_to_id: int) -> int:
        """Delete journal entries up to ``up_to_id`` (a device, once the server has them)."""
        if isinstance(up_to_id, bool) or not isinstance(up_to_id, int):
            raise InvalidType(f"up_to_id must be an int, not {up_to_id!r}")
        with self._write() as tx:
            return JournalTx(tx.conn).trim(up_to_id)

    def journal_remote_expiries(
        self, device: str, entries: Sequence[JournalEntry], *, clock_offset_ms: int = 0
    ) -> int:
        """Record expiries a device reports (from its own journal): side ``device``,
        times rebased to this clock by ``clock_offset_ms`` (device minus server). A
        report received twice is kept once. Returns how many entries were new
        (:meth:`journal_remote_expiries_each` answers each entry, and refuses
        foreign ones)."""
        check_name(device, "device name")
        if self._journal != "server":
            raise InvalidArgument("journal_remote_expiries needs QueueManager(..., journal='server')")
        rows = [_device_expiry_row(device, e, clock_offset_ms) for e in entries if e.kind == "expired"]
        with self._write() as tx:
            before = tx.conn.total_changes
            JournalTx(tx.conn).add(rows)
            return tx.conn.total_changes - before

    def journal_remote_expiries_each(
        self, device: str, entries: Sequence[JournalEntry], *, clock_offset_ms: int = 0
    ) -> list[RemoteExpiryResult]:
        """Record expiries a device reports, answering each entry (in order) instead of
        counting: ``recorded`` (new), ``already`` (kept before: a report received twice
        is kept once) or ``refused`` with the reason (not an expiry, or **foreign**: not
        the device's own message, nor one it pulled from a queue this server holds for
        it, ``<device>.<queue>``). Refusals never stop the rest. Times are rebased as in
        :meth:`journal_remote_expiries`.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> from edgeq.journal import JournalEntry
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME", journal="server")
        >>> own = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV1.42", "DEV1", check_point="get")
        >>> pulled = JournalEntry(0, "expired", "device", 5, "DEV1.INBOX", "HOME.7", "HOME", check_point="get")
        >>> foreign = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV2.9", "DEV2", check_point="get")
        >>> [r.status for r in qm.journal_remote_expiries_each("DEV1", [own, pulled, foreign, own])]
        ['recorded', 'recorded', 'refused', 'already']
        >>> qm.close()
        """
        check_name(device, "device name")
        if self._journal != "server":
            raise InvalidArgument("journal_remote_expiries_each needs QueueManager(..., journal='server')")
        if isinstance(clock_offset_ms, bool) or not isinstance(clock_offset_ms, int):
            raise InvalidType(f"clock_offset_ms must be an int, not {clock_offset_ms!r}")
        refusals = [remote_expiry_refusal(device, e) for e in entries]
        rows = [
            _device_expiry_row(device, e, clock_offset_ms)
            for e, why in zip(entries, refusals, strict=True) if why is None
        ]
        if rows:
            with self._write() as tx:
                added = iter(JournalTx(tx.conn).add_each(rows))
        else:
            added = iter(())
        return [
            RemoteExpiryResult(e.uid, e.queue, "refused", why) if why is not None
            else RemoteExpiryResult(e.uid, e.queue, "recorded" if next(added) else "already")
            for e, why in zip(entries, refusals, strict=True)
        ]

    def record_device(
        self, name: str, *, clock_offset_ms: int | None = None, agent: str | None = None
    ) -> None:
        """Note that device ``name`` was heard from now (and, at a hello, its clock
        offset: device clock minus ours, and its agent string)."""
        check_name(name, "device name")
        if clock_offset_ms is not None and (isinstance(clock_offset_ms, bool) or not isinstance(clock_offset_ms, int)):
            raise InvalidType(f"clock_offset_ms must be an int, not {clock_offset_ms!r}")
        with self._write() as tx:
            DeviceTx(tx.conn).seen(name, self._clock(), clock_offset_ms, agent)

    def devices(self) -> list[DeviceRecord]:
        """The devices this queue manager has heard from, by name.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.record_device("DEV1", clock_offset_ms=-12); [(d.name, d.clock_offset_ms) for d in qm.devices()]
        [('DEV1', -12)]
        >>> qm.close()
        """
        with self._db.read() as conn:
            return DeviceTx(conn).all()

    def register_device(self, name: str, public_key: bytes, *, queues: Sequence[str] | None = None) -> None:
        """Register a device for authenticated sync: its raw 32-byte Ed25519 public key,
        and the queues it may push to (None: any). Registering again re-keys it and
        lifts a revocation.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.register_device("DEV1", bytes(32), queues=["ORDERS"]); qm.device("DEV1").queues
        ('ORDERS',)
        >>> qm.close()
        """
        check_name(name, "device name")
        if "." in name:
            raise InvalidArgument(
                f"device name {name!r} must not contain '.': the home server holds a device's messages on "
                "queues named <device>.<queue>, so a dot would let one device read another's"
            )
        if not isinstance(public_key, bytes) or len(public_key) != 32:
            raise InvalidArgument(
                "public_key must be the 32 raw bytes of an Ed25519 public key "
                "(make a pair with `edgeq keys new`)"
            )
        if queues is not None:
            if isinstance(queues, str) or not isinstance(queues, Sequence):
                raise InvalidType("queues must be a list of queue names, or None for any")
            queues = [check_name(q, "queue name") for q in queues]
        with self._write() as tx:
            DeviceTx(tx.conn).register(name, public_key, queues, self._clock())

    def revoke_device(self, name: str) -> None:
        """Revoke a device: the server refuses its requests from now on."""
        check_name(name, "device name")
        with self._write() as tx:
            devices = DeviceTx(tx.conn)
            if devices.get(name) is None:
                raise DeviceNotFound(f"no device {name!r} is known here: see `edgeq server devices list`")
            devices.revoke(name, self._clock())

    def device(self, name: str) -> DeviceRecord | None:
        """What this queue manager knows of device ``name`` (None: nothing)."""
        check_name(name, "device name")
        with self._db.read() as conn:
            return DeviceTx(conn).get(name)

    def rotate_keys(self, queue: str | None = None, *, batch: int = 500) -> int:
        """Re-seal, under the current store key, every row of the encrypted queues (or
        of ``queue``) sealed with another key; return how many rows were re-sealed.

        Works in batches of ``batch`` rows, each its own transaction, so the queues
        stay in use throughout; a crash leaves each row sealed under one key or the
        other (the row says which), and running it again finishes the job. A row
        that fails its integrity check is quarantined.
        """
        batch = _check_count(batch)
        if self._keys is None:
            raise KeyMissing(f"rotating needs the store key ring: open the store with keys=... (or ${ENV_KEY_FILE})")
        keys = self._keys
        names = [queue] if queue is not None else [q.name for q in self._encrypted_queues()]
        total = 0
        for name in names:
            while True:
                now = self._clock()
                with self._write() as tx:
                    q = self._queue(tx, name)
                    rows = tx.stale_sealed(q.id, keys.current, batch) if q.encryption else []
                    resealed, events = [], []
                    for row in rows:
                        try:
                            opened = self._unseal(name, row)
                        except IntegrityError:
                            events += self._quarantine(tx, q, row, now)
                            continue
                        key_id, data, fields = self._seal_parts(name, row.origin, row.stamp, opened.data, opened.fields)
                        resealed.append((fields, data, key_id, row.id))
                    tx.reseal(resealed)
                    self._record(tx, events)
                self._rules.dispatch(events)
                total += len(resealed)
                if len(rows) < batch:
                    break
        return total

    def quarantined(self) -> list[QuarantineEntry]:
        """Rows moved to the quarantine because they failed their integrity check."""
        with self._db.read() as conn:
            return [QuarantineEntry(*row) for row in Tx(conn).quarantined()]


def _device_expiry_row(device: str, e: JournalEntry, clock_offset_ms: int) -> tuple[object, ...]:
    """The journal row of an expiry ``device`` reported, its times rebased to our clock."""
    return entry_row(
        "expired", "device", e.at_ms - clock_offset_ms, e.queue, e.uid, e.origin,
        check_point=e.check_point, size=e.size, created_ms=e.created_ms,
        arrived_ms=None if e.arrived_ms is None else e.arrived_ms - clock_offset_ms,
        clock_offset_ms=clock_offset_ms, device=device,
    )
