"""``qm.exchange``: the verbs only the sync agent and the home server call (transmission and
settling, refusals and sync state, a restored store, the journal's exchange, a home server's
held puts and device records), kept off the application's facade."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from edgeq.events.sink import EventSink
from edgeq.exchange.holds import HeldGroup, HeldUsage, Holds
from edgeq.exchange.restored import Restoration, check_restored, last_restoration, origin_seen, settled_marks
from edgeq.exchange.transmit import Refusal, Transmitter
from edgeq.message import Message
from edgeq.puts import Puts
from edgeq.store.devices import DeviceRefusal, DeviceRegistry
from edgeq.store.journal import JournalEntry, RemoteExpiryResult
from edgeq.uid import MessageUID

__all__ = ["Exchange"]


class Exchange:
    """What the sync agent and the home server call on a store (``qm.exchange``), built once
    by :class:`~edgeq.manager.QueueManager` from its parts."""

    def __init__(
        self, qm_name: str, puts: Puts, transmitter: Transmitter, sink: EventSink, holds: Holds,
        devices: DeviceRegistry,
    ) -> None:
        self.qm_name = qm_name
        self._puts = puts
        self._transmitter = transmitter
        self._sink = sink
        self._holds = holds
        self._devices = devices

    # -- transmission and settling -----------------------------------------------------------
    def set_transmitter(self, transmitter: Callable[[str], None] | None) -> None:
        """Register what pushes a sync-mode remote queue inside ``put`` (the sync agent
        does this): ``transmitter(queue_name)`` must deliver the queue now or raise."""
        self._transmitter.set_transmitter(transmitter)

    def next_for_transmission(self, queue: str, limit: int) -> list[Message]:
        """The next ``limit`` messages to transmit from a remote queue, in get order,
        without removing or locking them. Expired ones met first are discarded
        (rules see ``where="get"``): an expired message is never transmitted."""
        return self._transmitter.next_for_transmission(queue, limit)

    def transmitted(self, queue: str, uids: Sequence[MessageUID | str]) -> int:
        """Delete local copies the target has confirmed, in one transaction (rules see
        reason ``transmitted``); uids no longer here are skipped. Returns how many."""
        return self._transmitter.transmitted(queue, uids)

    def settled_below(self) -> int:
        """This store's low-water mark: no uid of its origin (``qm.origin``) with a stamp below it
        is held where it may be transmitted from with its uid (a remote queue, the
        dead-letter queue, a queue whose backout queue is remote), so none will ever be
        transmitted again (a put of one on a remote queue gives it a new uid). The sync agent
        sends it on every request; the receiver then forgets those uids (:meth:`settle`).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        >>> uid = qm.put("ORDERS", Message(b"x"))
        >>> qm.exchange.settled_below() == uid.stamp
        True
        >>> _ = qm.exchange.transmitted("ORDERS", [uid]); qm.exchange.settled_below() == uid.stamp + 1
        True
        >>> qm.close()
        """
        return self._transmitter.settled_below()

    def settle(self, origin: str, below: int) -> int:
        """The sender of ``origin``'s messages says it holds none with a stamp below
        ``below`` any more (its :meth:`settled_below`): forget those remembered
        confirmed uids on every queue. From then on ``origin``'s uids are forgotten only
        this way, never by age (``remember_confirmed_ms`` no longer applies to them).
        Returns how many were forgotten.

        >>> import tempfile, os
        >>> from edgeq import Message, MessageUID, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.define_queue("Q"); uid = MessageUID("DEV1:abc", 5)
        >>> _ = qm.put("Q", Message(b"x", uid=uid), confirm_id=1); qm.confirm_put("Q", uid)
        >>> x = qm.exchange
        >>> x.remembered_count("DEV1:abc"), x.settle("DEV1:abc", 6), x.remembered_count("DEV1:abc")
        (1, 1, 0)
        >>> qm.close()
        """
        return self._transmitter.settle(origin, below)

    def settle_queue(self, queue: str, held: Mapping[str, int]) -> int:
        """The sender of ``queue``'s messages (a home server, for a home-server queue)
        still holds, per origin, nothing below ``held[origin]``, and nothing of an origin
        it does not name (its :meth:`held_low_water`): forget the rest of the confirmed
        uids this queue remembers; those origins are no longer forgotten by age.
        Returns how many were forgotten."""
        return self._transmitter.settle_queue(queue, held)

    def held_low_water(self, queue: str) -> dict[str, int]:
        """Per origin, the lowest stamp ``queue`` holds in any state: a puller may be
        offered again only what is at or above it (sent with every pull).

        >>> import tempfile, os
        >>> from edgeq import Message, MessageUID, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.define_queue("Q"); _ = qm.put_many("Q", [Message(b"a", uid=MessageUID("X", 9)),
        ...                                            Message(b"b", uid=MessageUID("X", 7))])
        >>> qm.exchange.held_low_water("Q")
        {'X': 7}
        >>> qm.close()
        """
        return self._transmitter.held_low_water(queue)

    def remembered_count(self, origin: str | None = None) -> int:
        """How many confirmed uids this queue manager remembers to recognise late
        duplicates (of ``origin`` only, if given): bounded by what senders still hold."""
        return self._transmitter.remembered_count(origin)

    # -- a store restored from a backup (docs/protocol.md) ----------------------------------
    def check_restored(self, server: str, *, settled: int | None, seen: int | None) -> Restoration | None:
        """The sync agent's check at hello: ``server`` has settled this store's origin below
        ``settled`` and seen stamps up to ``seen``. If the store is behind that (restored
        from an older copy), it takes a new incarnation for everything it issues from now
        on, and keeps a record (:meth:`restoration`); returns it, or None.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> old = qm.origin; last = qm.exchange.settled_below() - 1
        >>> qm.exchange.check_restored("HOME", settled=last + 1, seen=last) is None  # what it sent
        True
        >>> found = qm.exchange.check_restored("HOME", settled=last + 9, seen=last + 8)  # never issued
        >>> (found.old_origin, found.new_origin) == (old, qm.origin) != (old, old)
        True
        >>> qm.close()
        """
        origin = self._puts.origin
        found = check_restored(self._sink, self.qm_name, origin, server, settled=settled, seen=seen)
        if found is not None:
            self._puts.origin = self._transmitter.origin = found.new_origin
        return found

    def restoration(self) -> Restoration | None:
        """When this store was last found restored from an older copy, and what was done
        (None: never). ``edgeq sync status`` shows it."""
        return last_restoration(self._sink)

    def origin_seen(self, origin: str) -> tuple[int | None, int | None]:
        """What this queue manager (a home server) has seen of a sender's store ``origin``:
        its settled mark and the highest stamp of it held or remembered (None: none)."""
        return origin_seen(self._sink, origin)

    def settled_marks(self, origins: Collection[str]) -> dict[str, int]:
        """The settled mark of each of ``origins`` that has one: a uid of that origin below
        it was settled by its sender, so it is a resend, never a new message."""
        return settled_marks(self._sink, origins)

    def refused(self, queue: str, refusals: Sequence[tuple[MessageUID | str, str]]) -> list[Refusal]:
        """The target of remote queue ``queue`` refused these ``(uid, reason)``: count one
        refusal each, and move those refused ``refusal_limit`` times (default
        ``edgeq.exchange.transmit.DEFAULT_REFUSAL_LIMIT``) to the dead-letter queue, in the same
        transaction (rules see them removed, reason ``refused``); one it cannot take
        stays (``Refusal.kept``, logged). The sync agent calls it.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("ORDERS", target_qmgr="HOME")
        >>> uid = qm.put("ORDERS", Message(b"x"))
        >>> [(r.count, r.dead_lettered) for r in qm.exchange.refused("ORDERS", [(uid, "no-queue")])]
        [(1, False)]
        >>> qm.close()
        """
        return self._transmitter.refused(queue, refusals)

    def record_sync_state(self, states: Mapping[str, Mapping[str, Any] | None]) -> None:
        """Keep the sync agent's state per queue (``""``: its own) in the store, as JSON."""
        self._transmitter.record_sync_state(states)


    # -- the journal -------------------------------------------------------------------------
    def journal_trim(self, up_to_id: int) -> int:
        """Delete journal entries up to ``up_to_id`` (a device, once the server has them)."""
        return self._sink.journal_trim(up_to_id)

    def journal_remote_expiries(
        self, device: str, entries: Sequence[JournalEntry], *, clock_offset_ms: int = 0
    ) -> int:
        """Record expiries a device reports (from its own journal): side ``device``,
        times rebased to this clock by ``clock_offset_ms`` (device minus server). A
        report received twice is kept once. Returns how many entries were new
        (:meth:`journal_remote_expiries_each` answers each entry, and refuses
        foreign ones)."""
        return self._sink.remote_expiries(device, entries, clock_offset_ms)

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
        >>> from edgeq.store.journal import JournalEntry
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME", journal="server")
        >>> own = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV1.42", "DEV1", check_point="get")
        >>> pulled = JournalEntry(0, "expired", "device", 5, "DEV1.INBOX", "HOME.7", "HOME",
        ...                       check_point="get")
        >>> foreign = JournalEntry(0, "expired", "device", 5, "ORDERS", "DEV2.9", "DEV2", check_point="get")
        >>> [r.status for r in qm.exchange.journal_remote_expiries_each("DEV1", [own, pulled, foreign, own])]
        ['recorded', 'recorded', 'refused', 'already']
        >>> qm.close()
        """
        return self._sink.remote_expiries_each(device, entries, clock_offset_ms)

    # -- held puts (a home server's) ---------------------------------------------------------
    def held_puts(self, sender: str | None = None, *, older_than_ms: int | None = None) -> list[HeldGroup]:
        """Assured puts stored locked and not confirmed (of queue manager ``sender``, any
        incarnation; held at least ``older_than_ms``), summed by sender and queue."""
        return self._holds.held(sender, older_than_ms=older_than_ms)

    def held_usage(
        self, sender: str, *, queue: str | None = None, uids: Sequence[MessageUID | str] | None = None
    ) -> HeldUsage:
        """What ``sender`` holds put-locked here (with ``queue`` and ``uids``: only those uids there)."""
        return self._holds.usage(sender, queue=queue, uids=uids)

    def undo_held_puts(self, sender: str | None = None, *, older_than_ms: int = 0) -> int:
        """Undo the held puts (of ``sender``) held ``older_than_ms`` or longer, as
        :meth:`~edgeq.manager.QueueManager.undo` does (rules see reason ``deleted``; a resend is
        stored afresh)."""
        return self._holds.undo(sender, older_than_ms=older_than_ms)

    # -- devices (a home server's) -----------------------------------------------------------
    def record_device(
        self, name: str, *, clock_offset_ms: int | None = None, agent: str | None = None
    ) -> None:
        """Note that device ``name`` was heard from now (and, at a hello, its clock
        offset: device clock minus ours, and its agent string)."""
        self._devices.record_device(name, clock_offset_ms=clock_offset_ms, agent=agent)

    def has_registered_device(self) -> bool:
        """Whether a device was ever registered here (revoked ones count): what turns a home
        server's authentication on. One SELECT that stops at the first such device.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> qm.exchange.record_device("DEV1"); qm.exchange.has_registered_device()
        False
        >>> qm.register_device("DEV1", bytes(32)); qm.exchange.has_registered_device()
        True
        >>> qm.close()
        """
        return self._devices.has_registered()

    def record_refusals(self, device: str, queue: str, refused: Mapping[str, tuple[int, str]]) -> None:
        """Note that this home server refused messages of ``device`` on ``queue`` now: per
        reason code, (how many, the last refusal's text); counted, never a row per message."""
        self._devices.record_refusals(device, queue, refused)

    def device_refusals(self, device: str | None = None) -> list[DeviceRefusal]:
        """What this home server refused, per device, queue and reason, the latest first.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "h.db"), name="HOME")
        >>> why = "no-queue: no queue 'METRICS'"
        >>> qm.exchange.record_refusals("DEV1", "METRICS", {"no-queue": (2, why)})
        >>> qm.exchange.record_refusals("DEV1", "METRICS", {"no-queue": (1, why)})
        >>> [(r.device, r.queue, r.reason, r.count) for r in qm.exchange.device_refusals()]
        [('DEV1', 'METRICS', 'no-queue', 3)]
        >>> qm.close()
        """
        return self._devices.refusals(device)
