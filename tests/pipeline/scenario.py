"""A home server's life, for the pipeline's tests: real QueueManagers, a shared ManualClock.

Devices (each a real ``QueueManager(journal="device")`` whose clock runs at its own
offset from the server's) create messages, and push them to a real home-server
``QueueManager(journal="server")`` through the calls the sync server makes:
``put_each`` (stage one, locked), ``confirm_put_each(device=, clock_offset_ms=)``
(stage two), with the wire's expiry rebasing (:class:`WireMessage`); they report
their own expiries with ``journal_remote_expiries``. Along the way: lost confirm
replies and resends, a network failure that makes messages expire on both sides
(MQe's "may seem to expire twice"), a late resend after the server forgot the
uid (a real duplicate acceptance), a non-assured push (an audit gap), local
traffic on the server, and pulls to a device.

``Truth`` records what happened, from the test's side, for ground-truth checks.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from edgeq import Int32, Int64, ManualClock, Message, MessageUID, QueueManager
from edgeq.errors import MessageExpired, MessageNotFound
from edgeq.sync.messages import WireMessage

#: 2025-11-21T22:00:00Z: the scenario crosses midnight (two date partitions).
START_MS = 1_763_683_200_000 + 22 * 3_600_000


@dataclass
class Truth:
    #: server-clock creation time of every uid a device created
    created_server_ms: dict[str, int] = field(default_factory=dict)
    #: (device, queue, latency_ms) per acceptance, computed from the test's own clock
    latencies: list[tuple[str, str, int]] = field(default_factory=list)
    #: uid -> sides it expired on
    expired: dict[str, set[str]] = field(default_factory=dict)
    #: every uid the server confirmed (accepted) at least once
    accepted: set[str] = field(default_factory=set)
    duplicates: set[str] = field(default_factory=set)
    gaps: set[str] = field(default_factory=set)
    uncorrected_devices: set[str] = field(default_factory=set)
    #: accepted and delivered on the server, then the device's copy expired (its confirm reply was lost)
    delivered_then_device_expired: set[str] = field(default_factory=set)
    #: accepted, not delivered, then the device's copy expired
    accepted_then_device_expired: set[str] = field(default_factory=set)
    #: refused by the server, moved to their device's dead-letter queue and still waiting there
    dead_letter_waiting: set[str] = field(default_factory=set)


class Device:
    def __init__(
        self, root: Path, name: str, offset_ms: int, clock: ManualClock, *, reports_offset: bool = True
    ):
        self.name, self.offset_ms, self.clock = name, offset_ms, clock
        self.reports_offset = reports_offset
        self.qm = QueueManager(root / f"{name}.db", name=name, journal="device", durability="normal",
                               clock=lambda: clock() + offset_ms)
        self.confirm_ids = iter(range(1, 10**9))
        for queue in ("ORDERS", "TELEMETRY", "INBOX"):
            self.qm.define_queue(queue)

    def create(self, truth: Truth, queue: str, count: int, *, expiry_ms: int | None = None) -> list[str]:
        uids = []
        for i in range(count):
            expiry = None if expiry_ms is None else Int32(expiry_ms)
            uid = self.qm.put(queue, Message(b"x" * (10 + i % 50), expiry=expiry))
            truth.created_server_ms[str(uid)] = self.clock()
            uids.append(str(uid))
            self.clock.advance(7)
        return uids


class Scenario:
    """The home server, its devices and the clock."""

    def __init__(self, root: Path, seed: int = 7) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.clock = ManualClock(START_MS)
        self.truth = Truth()
        self.home = QueueManager(root / "home.db", name="HOME", journal="server", durability="normal",
                                 clock=self.clock, remember_confirmed_ms=600_000)
        for queue in ("ORDERS", "TELEMETRY", "DEV1.INBOX"):
            self.home.define_queue(queue)
        self.server_confirm_ids = iter(range(1, 10**9))
        self.devices = [
            Device(root, "DEV1", 1_500, self.clock),            # ahead of the server
            Device(root, "DEV2", -700, self.clock),             # behind
            Device(root, "DEV3", 0, self.clock, reports_offset=False),  # offset unknown: uncorrected
        ]
        self.truth.uncorrected_devices.add("DEV3")

    # -- the two-stage push --------------------------------------------------------------------

    def push(
        self, dev: Device, queue: str, count: int, *, transit_ms: int, confirm_ms: int,
        lose_reply: bool = False, fail: bool = False, resend: bool = False,
    ) -> list[Message]:
        """One batch from ``dev``'s ``queue`` to the server's, as the sync agent does it."""
        if resend:
            dev.qm.release_locks(queue)
        got = dev.qm.get_many(queue, count, confirm_id=next(dev.confirm_ids))
        if not got:
            return []
        wire = [WireMessage.from_message(m, resend=resend) for m in got]
        self.clock.advance(transit_ms)
        now = self.clock()
        results = self.home.put_each(queue, [w.to_message(now, transit_ms) for w in wire],
                                     confirm_id=next(self.server_confirm_ids))
        for r in results:
            if r.status == "expired":
                self.truth.expired.setdefault(str(r.uid), set()).add("server")
        if fail:
            return got
        self.clock.advance(confirm_ms)
        stored = [r.uid for r in results if r.status in ("stored", "replaced")]
        offset = dev.offset_ms if dev.reports_offset else None
        for c in self.home.confirm_put_each(queue, stored, device=dev.name, clock_offset_ms=offset):
            if c.status == "confirmed":
                uid = str(c.uid)
                if any(d == dev.name and q == queue and u == uid for d, q, u in self._accepted):
                    self.truth.duplicates.add(uid)
                self._accepted.append((dev.name, queue, uid))
                self.truth.accepted.add(uid)
                self.truth.latencies.append((dev.name, queue,
                                             self.clock() - self.truth.created_server_ms[uid]))
            elif c.status == "expired":
                self.truth.expired.setdefault(str(c.uid), set()).add("server")
        if not lose_reply:
            for m in got:
                assert m.uid is not None
                with contextlib.suppress(MessageExpired, MessageNotFound):
                    dev.qm.confirm_get(queue, m.uid)
        return got

    _accepted: list[tuple[str, str, str]]

    def report_expiries(self, dev: Device) -> int:
        """The device's next sync: its own expiries, rebased by its offset."""
        entries = dev.qm.journal_since()
        for e in entries:
            if e.kind == "expired":
                self.truth.expired.setdefault(e.uid, set()).add("device")
        added = self.home.exchange.journal_remote_expiries(dev.name, entries, clock_offset_ms=dev.offset_ms)
        if entries:
            dev.qm.exchange.journal_trim(entries[-1].id)
        return added

    def consume(self, queue: str, count: int) -> None:
        self.home.get_many(queue, count)

    # -- the story -------------------------------------------------------------------------

    def run(self, rounds: int = 24) -> Truth:
        self._accepted = []
        rng = self.rng
        for round_no in range(rounds):
            for dev in self.devices:
                dev.create(self.truth, "ORDERS", rng.randint(3, 8))
                dev.create(self.truth, "TELEMETRY", rng.randint(2, 6),
                           expiry_ms=rng.choice([60_000, 300_000, 900_000]))
                if round_no % 5 == 1:  # short-lived readings that expire on the device before any sync
                    dev.create(self.truth, "TELEMETRY", 2, expiry_ms=200)
                self.clock.advance(rng.randint(100, 900))
            for dev in self.devices:
                lose = round_no % 7 == 3 and dev.name == "DEV2"
                for queue in ("ORDERS", "TELEMETRY"):
                    self.push(dev, queue, 50, transit_ms=rng.randint(5, 2_500),
                              confirm_ms=rng.randint(1, 400), lose_reply=lose)
                if lose:  # the confirm reply was lost: the next sync resends, the server says duplicate
                    self.clock.advance(rng.randint(1_000, 5_000))
                    for queue in ("ORDERS", "TELEMETRY"):
                        self.push(dev, queue, 50, transit_ms=rng.randint(5, 500), confirm_ms=5, resend=True)
                self.report_expiries(dev)
            if round_no == 6:
                self._expire_on_both_sides()
            if round_no == 9:
                self._late_duplicate()
            if round_no == 12:
                self._non_assured_push()
            if round_no == 15:
                self._expired_in_transit()
            if round_no == 18:
                self._lost_reply_then_expiry()
            if round_no == 20:
                self._refused_to_the_dead_letter_queue()
            # the server's own traffic: local puts (origin HOME), consumers, a pull to DEV1, a sweep
            self.home.put("ORDERS", Message(b"local"))
            self.home.put("DEV1.INBOX", Message(b"config"))
            if round_no == 3:  # pulled by DEV1, then it expires there: still the server's message
                self.home.put("DEV1.INBOX", Message(b"short-lived config", expiry=Int32(60_000)))
            self.consume("ORDERS", rng.randint(5, 25))
            self._pull(self.devices[0])
            self.clock.advance(rng.randint(8, 14) * 60_000)  # ten minutes or so between rounds
            self.home.sweep_expired()
        self._lost_reply_then_expiry(deliver=False)  # last: the server's copy is still there
        for dev in self.devices:
            dev.qm.sweep_expired()
            self.report_expiries(dev)
        self._note_server_expiries()
        return self.truth

    def _expire_on_both_sides(self) -> None:
        """Stage one reaches the server, then the network fails past the messages' expiry:
        they expire locked on the server (sweep) and on the device (sweep)."""
        dev = self.devices[1]
        dev.create(self.truth, "TELEMETRY", 4, expiry_ms=30_000)
        self.push(dev, "TELEMETRY", 50, transit_ms=100, confirm_ms=0, fail=True)
        self.clock.advance(60_000)
        self.home.sweep_expired("TELEMETRY")
        dev.qm.sweep_expired("TELEMETRY")
        self.report_expiries(dev)

    def _late_duplicate(self) -> None:
        """A confirm reply is lost and the device resends only after the server forgot the
        uid (``remember_confirmed_ms``): the server accepts it a second time."""
        dev = self.devices[0]
        dev.create(self.truth, "ORDERS", 1)
        self.push(dev, "ORDERS", 1, transit_ms=50, confirm_ms=5, lose_reply=True)
        self.consume("ORDERS", 1_000)  # the first copy is delivered
        self.clock.advance(700_000)
        other = self.devices[1]  # another device's confirm makes the server forget old uids
        other.create(self.truth, "ORDERS", 1)
        self.push(other, "ORDERS", 50, transit_ms=50, confirm_ms=5)
        self.push(dev, "ORDERS", 1, transit_ms=50, confirm_ms=5, resend=True)

    def _expired_in_transit(self) -> None:
        """A slow push: the messages expire in transit, so the server discards them on
        arrival (check point add) and the device's locked copies expire at its confirm."""
        dev = self.devices[0]
        dev.create(self.truth, "TELEMETRY", 3, expiry_ms=2_000)
        self.push(dev, "TELEMETRY", 50, transit_ms=3_000, confirm_ms=5)
        self.report_expiries(dev)

    def _lost_reply_then_expiry(self, *, deliver: bool = True) -> None:
        """The server accepts two short-lived messages but the confirm reply is lost; the server's
        application consumes them (``deliver``), and the device's locked copies expire before a resend."""
        dev = self.devices[1]
        uids = dev.create(self.truth, "ORDERS", 2, expiry_ms=30_000)
        self.push(dev, "ORDERS", 50, transit_ms=20, confirm_ms=5, lose_reply=True)
        if deliver:
            self.consume("ORDERS", 1_000)
        self.clock.advance(60_000)
        dev.qm.sweep_expired("ORDERS")
        self.report_expiries(dev)
        (self.truth.delivered_then_device_expired
         if deliver else self.truth.accepted_then_device_expired).update(uids)

    def _refused_to_the_dead_letter_queue(self) -> None:
        """The server has no METRICS: each of three messages is refused up to its limit and moves
        to the device's dead-letter queue; the operator deletes one there. Two wait: the audit
        must say so (and count none as a gap)."""
        dev = self.devices[2]
        dev.qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=1)
        uids = dev.create(self.truth, "METRICS", 3)
        dev.qm.exchange.refused("METRICS", [(uid, "no-queue: HOME has no queue METRICS") for uid in uids])
        dev.qm.dlq_delete([uids[0]])
        self.truth.dead_letter_waiting.update(uids[1:])
        self.report_expiries(dev)

    def _non_assured_push(self) -> None:
        """A device message put on the server without the two-stage protocol, then consumed:
        it was never accepted, so the audit reports it as a gap."""
        dev = self.devices[2]
        (uid,) = dev.create(self.truth, "ORDERS", 1)
        (m,) = dev.qm.get_many("ORDERS", 1)
        self.home.put_each("ORDERS", [WireMessage.from_message(m).to_message(self.clock())])
        self.consume("ORDERS", 1_000)
        self.truth.gaps.add(uid)

    def _pull(self, dev: Device) -> None:
        got = self.home.get_many("DEV1.INBOX", 10, confirm_id=next(self.server_confirm_ids))
        for m in got:
            left = m.remaining_expiry_ms
            expiry = None if left is None else Int64(dev.qm.now_ms() + left)
            dev.qm.put("INBOX", Message(m.data, uid=m.uid, created_ms=m.created_ms, expiry=expiry))
            assert m.uid is not None
            self.home.confirm_get("DEV1.INBOX", m.uid)

    def _note_server_expiries(self) -> None:
        for e in self.home.journal_since(0, 1_000_000):
            if e.kind == "expired" and e.side == "server":
                self.truth.expired.setdefault(e.uid, set()).add("server")

    def close(self) -> None:
        self.home.close()
        for dev in self.devices:
            dev.qm.close()


def uid_of(text: str) -> MessageUID:
    return MessageUID.parse(text)
