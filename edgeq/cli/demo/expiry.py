"""Act one of ``edgeq demo``: MQe's message expiry, step by step, on one store."""

from __future__ import annotations

from pathlib import Path

from edgeq.cli.demo.base import DemoResult, Echo, Narration, brief, clock_time, text
from edgeq.cli.format import format_duration, format_time
from edgeq.clock import ManualClock
from edgeq.events.bindings import RuleSpec
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent

__all__ = ["DEMO_QM", "RULES", "START_MS", "run_expiry_act"]

#: The queue manager name of act one's store (what ``--replace`` checks for).
DEMO_QM = "EDGEQ.DEMO"
#: Act one's clock starts at 2025-11-21T09:00:00Z.
START_MS = 1_763_715_600_000
ORDERS, ALERTS, DLQ = "ORDERS", "ALERTS", "DEAD.LETTER"
#: The rules bound by name to ORDERS and ALERTS, stored with the queue definitions.
RULES: list[RuleSpec] = [("dead-letter", {"queue": DLQ}), "counters"]


class _Narrator(QueueRule):
    """Prints what the queue manager tells its rules, and records every discard."""

    def __init__(self, echo: Echo, result: DemoResult) -> None:
        self.echo, self.result = echo, result

    def on_activated(self, event: RuleEvent) -> None:
        self.echo(f"      rule> {event.queue} activated (first use since the queue manager opened)")

    def on_expired(self, event: RuleEvent) -> None:
        assert event.message is not None and event.where is not None  # set on every expired event
        data = text(event.message)
        self.result.expirations.append((event.queue, event.where, data))
        self.echo(f"      rule> {event.queue}: {data!r} EXPIRED at check point '{event.where}'"
                  f" (copied to {DLQ})")

    def on_removed(self, event: RuleEvent) -> None:
        assert event.message is not None  # set on every removed event
        self.echo(f"      rule> {event.queue}: {text(event.message)!r} removed ({event.reason})")

    def on_queue_deleted(self, event: RuleEvent) -> None:
        self.echo(f"      rule> {event.queue} deleted")


class _Tour:
    def __init__(self, path: Path, out: Narration, result: DemoResult) -> None:
        self.path, self.out, self.result = path, out, result
        self.echo, self.say = out.echo, out.say
        self.clock = ManualClock(START_MS)
        self.qm = self.open()

    def open(self) -> QueueManager:
        return QueueManager(self.path, name=DEMO_QM, clock=self.clock)

    def add_narrator(self, *queues: str) -> None:
        for queue in queues:
            self.qm.add_rule(queue, _Narrator(self.echo, self.result))

    def step(self, title: str) -> None:
        self.out.step(title, self.clock())

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.say(f"... the clock moves on {format_duration(ms)}, to {clock_time(self.clock())}")

    def show(self, queue: str) -> None:
        messages = self.qm.browse(queue)
        if not messages:
            self.say(f"  browse {queue}: nothing visible")
        for message in messages:
            self.say(f"  browse {queue}: {brief(message, pad=10)}")


def run_expiry_act(path: Path, out: Narration, result: DemoResult) -> None:
    """Act one: expiry on one store, at each of MQe's check points."""
    tour = _Tour(path, out, result)
    steps = (_setup, _expiry_kinds, _check_add, _cap, _check_get, _check_depth, _check_delete,
             _check_activate, _sweep, _assured, _summary)
    try:
        for step in steps:
            step(tour)
    finally:
        tour.qm.close()


def _setup(t: _Tour) -> None:
    t.echo("Act one: MQe's message expiry, step by step, on a real SQLite store.")
    t.echo(f"Store: {t.path} (queue manager {DEMO_QM}).")
    t.echo(f"The clock is a ManualClock set to {format_time(START_MS)}: the demo moves it by hand,")
    t.echo("so nothing waits and every run prints the same.")
    t.step("Define three queues")
    t.qm.define_queue(DLQ)
    t.say(f"{DLQ:<12} no expiry: where expired messages are copied")
    t.qm.define_queue(ORDERS, expiry_ms=60_000, rules=RULES)
    t.say(f"{ORDERS:<12} expiry_ms 60s: a message without an expiry of its own lives 60s on it")
    t.qm.define_queue(ALERTS, cap_expiry_ms=30_000, ordering="fifo", rules=RULES)
    t.say(f"{ALERTS:<12} cap_expiry_ms 30s: no message lives longer than 30s on it; FIFO order")
    t.say(f"Both are defined with rules={RULES!r}:")
    t.say("built-in rules bound by name and stored with the queue. dead-letter copies every expired")
    t.say(f"message to {DLQ} (a rule cannot stop a discard, but it can keep a copy); counters")
    t.say("counts what happens. A third, in-process rule added with add_rule() narrates what")
    t.say("the queue manager tells its rules: the 'rule>' lines.")
    t.add_narrator(ORDERS, ALERTS)


def _expiry_kinds(t: _Tour) -> None:
    t.step("Put three orders: queue expiry, relative expiry, absolute expiry")
    t.qm.put(ORDERS, Message(b"order-A", priority=2))
    t.say("order-A  priority 2, no expiry of its own: ORDERS' expiry_ms (60s) applies")
    t.qm.put(ORDERS, Message(b"order-B", priority=5).expire_after(300_000))
    t.say("order-B  priority 5, expire_after(5m) = Int32(300000): RELATIVE, 5m after creation;")
    t.say("         a message's own expiry overrides the queue's, so it outlives the 60s")
    t.qm.put(ORDERS, Message(b"order-C", priority=8).expire_at(START_MS + 20_000))
    t.say(f"order-C  priority 8, expire_at({format_time(START_MS + 20_000)}) = Int64: ABSOLUTE epoch ms")
    t.say("Browsing shows them in get order, highest priority first, with time left:")
    t.show(ORDERS)


def _check_add(t: _Tour) -> None:
    t.step("Expiry check 1 of 5, 'add': a message that arrives already expired")
    t.say(f"order-X has expire_at({format_time(START_MS - 60_000)}), a minute ago.")
    t.qm.put(ORDERS, Message(b"order-X").expire_at(START_MS - 60_000))
    t.say(f"put() discarded it on arrival and never stored it: depth of {ORDERS} is {t.qm.depth(ORDERS)}.")


def _cap(t: _Tour) -> None:
    t.step("cap_expiry_ms: the queue's cap cuts any longer expiry at put")
    t.qm.put(ALERTS, Message(b"alert-1").expire_after(3_600_000))
    t.say("alert-1  asks for expire_after(1h)")
    t.qm.put(ALERTS, Message(b"alert-2"))
    t.say("alert-2  has no expiry at all")
    t.say("Both get the cap, 30s; a capped message reports the cap as an absolute Int64 expiry:")
    t.show(ALERTS)


def _check_get(t: _Tour) -> None:
    t.step("Expiry check 2 of 5, 'get': expired messages in the way are discarded")
    t.advance(65_000)
    t.say("order-C's absolute time (09:00:20) and order-A's 60s on the queue have passed.")
    got = t.qm.get(ORDERS)
    assert got is not None  # order-B is alive: its own expiry runs to 09:05:00
    t.say(f"get({ORDERS}) discarded order-C, first in line, and returned:")
    t.say(f"  {brief(got)}")
    t.say("order-B's own 5m expiry overrides the queue's 60s; a got message reports the time left.")
    t.say("order-A, behind it, was not reached: it is expired but still stored.")


def _check_depth(t: _Tour) -> None:
    t.step("Expiry check 3 of 5, 'depth': asking a queue's size purges it first")
    count = t.qm.depth(ORDERS)
    t.say(f"depth({ORDERS}) = {count}: order-A was discarded before counting, never counted.")


def _check_delete(t: _Tour) -> None:
    t.step("Expiry check 4 of 5, 'delete': expired messages go before the emptiness test")
    t.say(f"{ALERTS} still stores alert-1 and alert-2; their 30s cap passed at 09:00:30,")
    t.say("but nobody has looked at the queue since, so they are still there.")
    t.qm.delete_queue(ALERTS)
    t.say(f"delete_queue({ALERTS}) discarded them first, found the queue empty and deleted it.")
    t.say(f"Queues now: {', '.join(t.qm.queue_names())}")


def _check_activate(t: _Tour) -> None:
    t.step("Expiry check 5 of 5, 'activate': first use after reopening, locked messages too")
    uid = t.qm.put(ORDERS, Message(b"order-F").expire_after(10_000), confirm_id=7)
    # The uid's origin carries this store's random incarnation: elided so every run reads the same.
    t.say(f"order-F  expire_after(10s), put with confirm_id=7 (assured put), uid {uid.qmgr}:….{uid.stamp}.")
    t.say(f"It is stored locked and invisible: depth {t.qm.depth(ORDERS)}, and browse shows:")
    t.show(ORDERS)
    t.say("Then the device loses power before confirm_put(): the queue manager closes.")
    t.qm.close()
    t.advance(15_000)
    t.qm = t.open()
    t.add_narrator(ORDERS)
    bound = ", ".join(b.name for b in t.qm.queue_bindings(ORDERS) if b.persisted)
    t.say(f"Reopened {DEMO_QM}: the stored bindings ({bound}) came back by themselves;")
    t.say("the narrator, an in-process rule, lives as long as the object and is added again.")
    t.say(f"The first use of {ORDERS} activates it (here: a call to activate() itself).")
    count = t.qm.activate(ORDERS)
    t.say(f"activate({ORDERS}) discarded {count} message(s), whatever their state.")


def _sweep(t: _Tour) -> None:
    t.step("The sweep: discarding expired messages without waiting for a check")
    t.qm.put(ORDERS, Message(b"reading-1").expire_after(1_000))
    t.qm.put(ORDERS, Message(b"reading-2").expire_after(2_000))
    t.say("reading-1 and reading-2 expire after 1s and 2s; nobody reads them.")
    t.advance(3_000)
    count = t.qm.sweep_expired()
    t.say(f"sweep_expired() discarded {count} (start_expiry_sweeper() runs it on a timer).")


def _assured(t: _Tour) -> None:
    t.step("Assured delivery: put + confirm_put, get + undo, get + confirm_get")
    uid = t.qm.put(ORDERS, Message(b"order-G", priority=6), confirm_id=101)
    t.say(f"put(confirm_id=101): order-G is stored locked; depth {t.qm.depth(ORDERS)}, browse:")
    t.show(ORDERS)
    t.qm.confirm_put(ORDERS, uid)
    t.say("confirm_put(): now it is visible.")
    t.show(ORDERS)
    t.qm.get(ORDERS, confirm_id=202)
    t.say("get(confirm_id=202) locked it; the consumer fails before confirming, so undo(202):")
    t.qm.undo(ORDERS, 202)
    t.show(ORDERS)
    t.say("A failed message comes back only after its redelivery delay (1s, doubling with each failure):")
    t.advance(1_000)
    got = t.qm.get(ORDERS, confirm_id=203)
    assert got is not None and got.uid == uid  # the only visible message, undone above
    t.say("get(confirm_id=203) locked it again; this time the consumer confirms:")
    t.qm.confirm_get(ORDERS, uid)
    t.say(f"confirm_get() deleted it: depth of {ORDERS} is {t.qm.depth(ORDERS)}.")


def _summary(t: _Tour) -> None:
    t.step("Where things stand")
    counts: dict[str, int] = {}
    for _, where, _data in t.result.expirations:
        counts[where] = counts.get(where, 0) + 1
    seen = ", ".join(f"{where} {n}" for where, n in counts.items())
    t.say(f"The rules saw {len(t.result.expirations)} expirations: {seen}.")
    for queue in t.qm.queue_names():
        t.result.depths[queue] = t.qm.depth(queue)
        t.say(f"{queue:<12} depth {t.result.depths[queue]}")
    t.result.stats = t.qm.queue_stats(ORDERS)
    t.say(f"The counters rule's figures for {ORDERS}, from queue_stats({ORDERS!r}):")
    width = max(len(name) for name in t.result.stats)
    for name, value in t.result.stats.items():
        t.say(f"  {name:<{width}}  {value}")
    t.say(f"{DLQ} keeps a copy of each expired message, with fields dlq.queue, dlq.where")
    t.say("and more. Look at them, and at the counters and bindings (opened again, the store")
    t.say("follows the real clock):")
    t.say(f"  edgeq --db {t.path} browse {DLQ}")
    t.say(f"  edgeq --db {t.path} queue stats {ORDERS}")
    t.say(f"  edgeq --db {t.path} queue show {ORDERS}")
