"""``qm.exchange``: the verbs only the sync agent and the home server call (docs/api.md)."""

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
    """What the sync agent and the home server call on a store, built by the queue manager."""

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
        """Register what pushes a sync-mode remote queue inside ``put``: it delivers the queue or raises."""
        self._transmitter.set_transmitter(transmitter)

    def next_for_transmission(self, queue: str, limit: int) -> list[Message]:
        """The next ``limit`` messages to transmit from a remote queue, not locked; never an expired one."""
        return self._transmitter.next_for_transmission(queue, limit)

    def transmitted(self, queue: str, uids: Sequence[MessageUID | str]) -> int:
        """Delete local copies the target has confirmed (uids no longer here skipped); return how many."""
        return self._transmitter.transmitted(queue, uids)

    def settled_below(self) -> int:
        """The low-water mark of this store's uids: none below it will ever be transmitted again."""
        return self._transmitter.settled_below()

    def settle(self, origin: str, below: int) -> int:
        """Forget the confirmed uids of ``origin`` below ``below`` on every queue; return how many."""
        return self._transmitter.settle(origin, below)

    def settle_queue(self, queue: str, held: Mapping[str, int]) -> int:
        """Forget the confirmed uids ``queue`` remembers below its sender's ``held`` marks; how many."""
        return self._transmitter.settle_queue(queue, held)

    def held_low_water(self, queue: str) -> dict[str, int]:
        return self._transmitter.held_low_water(queue)

    def remembered_count(self, origin: str | None = None) -> int:
        """How many confirmed uids are remembered to recognise late duplicates (of ``origin``)."""
        return self._transmitter.remembered_count(origin)

    # -- a store restored from a backup (docs/protocol.md) ----------------------------------
    def check_restored(self, server: str, *, settled: int | None, seen: int | None) -> Restoration | None:
        """Take a new incarnation if ``server`` has seen more of this store than it holds (restored)."""
        origin = self._puts.origin
        found = check_restored(self._sink, self.qm_name, origin, server, settled=settled, seen=seen)
        if found is not None:
            self._puts.origin = self._transmitter.origin = found.new_origin
        return found

    def restoration(self) -> Restoration | None:
        """When this store was last found restored from an older copy, and what was done (None: never)."""
        return last_restoration(self._sink)

    def origin_seen(self, origin: str) -> tuple[int | None, int | None]:
        """The settled mark and highest stamp seen of sender store ``origin`` (None: none)."""
        return origin_seen(self._sink, origin)

    def settled_marks(self, origins: Collection[str]) -> dict[str, int]:
        return settled_marks(self._sink, origins)

    def refused(self, queue: str, refusals: Sequence[tuple[MessageUID | str, str]]) -> list[Refusal]:
        """Count a refusal of each ``(uid, reason)``; dead-letter those refused ``refusal_limit`` times."""
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
        """Record expiries a device reports, each once; return how many were new."""
        return self._sink.remote_expiries(device, entries, clock_offset_ms)

    def journal_remote_expiries_each(
        self, device: str, entries: Sequence[JournalEntry], *, clock_offset_ms: int = 0
    ) -> list[RemoteExpiryResult]:
        """Record expiries a device reports, with an outcome per entry (foreign ones refused)."""
        return self._sink.remote_expiries_each(device, entries, clock_offset_ms)

    # -- held puts (a home server's) ---------------------------------------------------------
    def held_puts(self, sender: str | None = None, *, older_than_ms: int | None = None) -> list[HeldGroup]:
        """Assured puts held locked and unconfirmed (of ``sender``), summed by sender and queue."""
        return self._holds.held(sender, older_than_ms=older_than_ms)

    def held_usage(
        self, sender: str, *, queue: str | None = None, uids: Sequence[MessageUID | str] | None = None
    ) -> HeldUsage:
        """What ``sender`` holds put-locked here (only ``uids`` on ``queue``, if given)."""
        return self._holds.usage(sender, queue=queue, uids=uids)

    def undo_held_puts(self, sender: str | None = None, *, older_than_ms: int = 0) -> int:
        """Undo the held puts (of ``sender``) held ``older_than_ms`` or longer; return how many."""
        return self._holds.undo(sender, older_than_ms=older_than_ms)

    # -- devices (a home server's) -----------------------------------------------------------
    def record_device(
        self, name: str, *, clock_offset_ms: int | None = None, agent: str | None = None
    ) -> None:
        """Note that device ``name`` was heard from now (at a hello: its clock offset and agent)."""
        self._devices.record_device(name, clock_offset_ms=clock_offset_ms, agent=agent)

    def rekey_device(self, name: str, public_key: bytes, *, share_key: bool = False) -> list[str]:
        """Give registered device ``name`` a new key (its queues kept, a revocation lifted); a key another
        device has is refused unless ``share_key``: returns those devices."""
        return self._devices.rekey_device(name, public_key, share_key=share_key)

    def set_device_queues(self, name: str, queues: Sequence[str] | None) -> None:
        """Change the queues registered device ``name`` may push to (None: any)."""
        self._devices.set_device_queues(name, queues)

    def has_registered_device(self) -> bool:
        """Whether a device was ever registered here: what turns authentication on."""
        return self._devices.has_registered()

    def record_refusals(self, device: str, queue: str, refused: Mapping[str, tuple[int, str]]) -> None:
        """Count this home server's refusals of ``device``'s messages on ``queue``, per reason."""
        self._devices.record_refusals(device, queue, refused)

    def record_backlog(self, device: str, queue: str, messages: int) -> None:
        """Keep the backlog ``device`` last reported pushing to ``queue`` (docs/console.md, "Backlog")."""
        self._devices.record_backlog(device, queue, messages)

    def device_refusals(self, device: str | None = None) -> list[DeviceRefusal]:
        return self._devices.refusals(device)
