"""Act two of ``edgeq demo``: store and forward between a device and its home server, over HTTP."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from edgeq.cli.demo.base import DEVICE_QM, HOME_QM, ForwardResult, Narration, brief, clock_time, text
from edgeq.cli.demo.loopback import Exchange, LoopbackServer, Timeline, Wire
from edgeq.cli.format import format_duration, format_time
from edgeq.clock import ManualClock
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import PushReport, SyncAgent

__all__ = ["DEVICE_QM", "HOME_QM", "START_MS", "run_forward_act"]

#: Act two's clocks start at 2005-01-01T09:40:00Z: MQe's manual sets "expires twice" on that day.
START_MS = 1_104_572_400_000
ORDERS, INBOX = "ORDERS", "INBOX"
#: Where the home server holds what the device's INBOX pulls.
HELD = p.device_queue_name(DEVICE_QM, INBOX)
_MINUTE = 60_000


class _ExpiryNarrator(QueueRule):
    """Adds every expiry on its queue to the timeline, as ``side> ...``, and records it."""

    def __init__(self, side: str, timeline: Timeline, result: ForwardResult) -> None:
        self.side, self.timeline, self.result = side, timeline, result

    def on_expired(self, event: RuleEvent) -> None:
        assert event.message is not None and event.where is not None  # set on every expired event
        data = text(event.message)
        self.result.expirations.append((self.side, event.queue, event.where, data))
        self.timeline.add(f"{self.side}> {event.queue}: {data!r} EXPIRED at check point '{event.where}'")


class _Forward:
    def __init__(self, device_path: Path, home_path: Path, out: Narration) -> None:
        self.out, self.say = out, out.say
        self.result = ForwardResult(device_path, home_path)
        self.device_clock, self.home_clock = ManualClock(START_MS), ManualClock(START_MS)
        self.timeline = Timeline()
        # Closed in reverse order (agent, client, server, stores), also if a later part fails to start.
        self._parts = ExitStack()
        try:
            self.device = self._parts.enter_context(
                QueueManager(device_path, name=DEVICE_QM, clock=self.device_clock))
            self.home = self._parts.enter_context(
                QueueManager(home_path, name=HOME_QM, clock=self.home_clock, journal="server"))
            self.server = LoopbackServer(self.home, self.home_clock)
            self._parts.callback(self.server.stop)
            self.wire = Wire(self.server, self.timeline)
            self._parts.callback(self.wire.close)
            # The agent's monotonic clock runs with the device's clock: time passes only when the demo says.
            self.agent = self._parts.enter_context(SyncAgent(
                self.device, self.server.url, client=self.wire.client, clock=self.device_clock,
                monotonic=lambda: (self.device_clock() - START_MS) / 1000))
        except BaseException:
            self._parts.close()
            raise

    def close(self) -> None:
        self._parts.close()

    def step(self, title: str) -> None:
        self.out.step(title, self.device_clock())

    def advance(self, ms: int) -> None:
        self.device_clock.advance(ms)
        self.home_clock.advance(ms)
        self.say(f"... both clocks move on {format_duration(ms)}, to {clock_time(self.device_clock())}")

    def fact(self, step: str, name: str, value: int) -> int:
        self.result.facts.setdefault(step, {})[name] = value
        return value

    def put(self, message: Message) -> None:
        self.result.uids[text(message)] = str(self.device.put(ORDERS, message))

    def push(self, intro: str, *, drop_after_put: bool = False) -> PushReport:
        if drop_after_put:
            self.wire.drop_after(p.PATH_PUT)
        self.say(intro)
        report = self.agent.push_once()
        if not self.flush():
            self.say("  (no exchange: nothing to send)")
        return report

    def flush(self) -> int:
        entries = self.timeline.take()
        for entry in entries:
            self.say(f"  {entry}" if isinstance(entry, str) else f"  {_render(entry)}")
        return len(entries)

    def label(self, uid: str) -> str:
        return next((data for data, known in self.result.uids.items() if known == uid), uid)

    def visible(self, queue: str) -> list[str]:
        return [text(m) for m in self.home.browse(queue)]

    def accepted(self) -> Counter[str]:
        return Counter(self.label(e.uid) for e in self.home.journal_since() if e.kind == "accepted")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _render(x: Exchange) -> str:
    kind, body = x.path.removeprefix("/v1/"), x.sent
    if kind == "put":
        messages = body["messages"]
        what = f"put {body['queue']}: {_count(len(messages), 'message')}"
        if len(messages) == 1 and "x" in messages[0]:
            what += f", {format_duration(messages[0]['x'])} left"
        what += ", resend" if any(m.get("r") for m in messages) else ""
    elif kind in ("confirm", "pull/confirm"):
        what = f"{kind.replace('/', '-')} {body['queue']}: {_count(len(body['uids']), 'uid')}"
    elif kind == "expiries":
        what = f"expiries: {_count(len(body['entries']), 'report')}"
    else:
        what = f"{kind} {body.get('queue', '')}".rstrip()
    answer = x.answer
    if answer is None:
        return f"{what:<38} x  no answer: the home server is unreachable"
    if kind == "hello":
        said = f"{answer['server']}, clocks {format_duration(abs(int(answer['offset_ms'])))} apart"
    elif kind == "pull":
        said = _count(len(answer["messages"]), "message")
    else:
        said = ", ".join(f"{s} {n}" for s, n in Counter(r["s"] for r in answer["results"]).items())
    return f"{what:<38} <- {said}"


@contextmanager
def _agent_logs_muted() -> Iterator[None]:
    """The narration says what failed: the agent's own warnings would only repeat it on stderr."""
    logger = logging.getLogger("edgeq.sync")
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)


def run_forward_act(device_path: Path, home_path: Path, out: Narration) -> ForwardResult:
    """Act two: a device and a real home server, store and forward across a dropped link."""
    with _agent_logs_muted():
        f = _Forward(device_path, home_path, out)
        try:
            for step in (_setup, _store, _forward, _resend, _reply, _expires_twice, _summary):
                step(f)
        finally:
            f.close()
    for x in f.timeline.exchanges:
        uids = [m["u"] for m in x.sent.get("messages", [])] + list(x.sent.get("uids", []))
        uids += [e["u"] for e in x.sent.get("entries", [])]
        answered = None if x.answer is None else [r["s"] for r in x.answer.get("results", [])]
        f.result.exchanges.append((x.path, uids, answered))
    return f.result


def _setup(f: _Forward) -> None:
    f.out.echo("")
    f.out.echo("Act two: store and forward, the job edgeq exists for.")
    f.out.echo(f"Two more stores: the device {DEVICE_QM} ({f.result.device_path})")
    f.out.echo(f"and its home server {HOME_QM} ({f.result.home_path}).")
    f.out.echo("The home server is the real one, the app edgeq serve runs (Starlette on uvicorn), on a")
    f.out.echo("loopback port; the device talks to it with the real sync agent (SyncAgent, what edgeq sync")
    f.out.echo("runs): CBOR over HTTP. Each queue manager has its own ManualClock; both start at")
    f.out.echo(f"{format_time(START_MS)}, the day of MQe's own example, and move together.")
    f.step("A device and its home server, which is not running yet")
    f.device.define_remote_queue(ORDERS, target_qmgr=HOME_QM)
    f.device.define_home_server_queue(INBOX, server=HOME_QM)
    f.home.define_queue(ORDERS)
    f.home.define_queue(HELD)
    f.say(f"{DEVICE_QM}  {ORDERS:<16} remote queue for {HOME_QM}'s {ORDERS}: stored here, forwarded later")
    f.say(f"{DEVICE_QM}  {INBOX:<16} home-server queue: filled by pulling {HOME_QM}'s {HELD}")
    f.say(f"{HOME_QM}  {ORDERS:<16} local queue: where the device's orders arrive")
    f.say(f"{HOME_QM}  {HELD:<16} local queue: what the server holds for the device")
    f.say("The home server journals what it accepts, expires and delivers; the device journals its")
    f.say("expiries and reports them. A narrating rule on each side prints every expiry: the")
    f.say("'device>' and 'server>' lines.")
    for side, qm, queues in (("device", f.device, (ORDERS, INBOX)), ("server", f.home, (ORDERS, HELD))):
        for queue in queues:
            qm.add_rule(queue, _ExpiryNarrator(side, f.timeline, f.result))


def _store(f: _Forward) -> None:
    f.step("Store: three orders put while the home server is down")
    for n in (1, 2, 3):
        f.put(Message(f"order-{n}".encode()))
    f.say(f"order-1, order-2 and order-3 put on the device's remote queue {ORDERS} (no expiry).")
    report = f.push("push_once(), exchange by exchange:")
    f.fact("store", "sent", report.sent)
    f.say(f"{'The push failed' if report.error else 'The push went through'}: nothing listens there yet. "
          "Nothing is lost: the orders")
    f.say(f"wait in the device's store. {DEVICE_QM} {ORDERS} depth "
          f"{f.fact('store', 'device ORDERS', f.device.depth(ORDERS))}, "
          f"{HOME_QM} {ORDERS} depth {f.fact('store', 'server ORDERS', f.home.depth(ORDERS))}.")
    f.say("(edgeq sync, the daemon, tries again with exponential backoff.)")


def _forward(f: _Forward) -> None:
    f.step("Forward: the home server starts, and each order arrives exactly once")
    f.advance(_MINUTE)
    f.server.start()
    f.say(f"The home server starts: create_app({HOME_QM}) served by uvicorn on loopback.")
    report = f.push("push_once():")
    f.fact("forward", "transmitted", report.transmitted)
    f.say("A hello, then MQe's two stages for the batch: the put stores the orders locked (invisible")
    f.say("to the server's applications), the confirm makes them visible, then the device deletes its")
    f.say("copies in one transaction. The puts say 'resend': until a push has completed, the agent")
    f.say("cannot know whether an earlier run sent them; a resend of what the server never had is new.")
    f.say(f"{DEVICE_QM} {ORDERS} depth {f.fact('forward', 'device ORDERS', f.device.depth(ORDERS))}; "
          f"{HOME_QM} {ORDERS} depth {f.fact('forward', 'server ORDERS', f.home.depth(ORDERS))}, browse:")
    for message in f.home.browse(ORDERS):
        f.say(f"  browse {ORDERS}: {brief(message, pad=9)}")
    f.fact("forward", "sent again", f.push("push_once() again:").sent)
    accepted = f.accepted()
    f.fact("forward", "accepted", sum(accepted.values()))
    f.say("The server's journal accepted "
          + ", ".join(f"{label} {_times(n)}" for label, n in accepted.items()) + ".")


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _resend(f: _Forward) -> None:
    f.step("The link drops between the two stages: resent, and still exactly once")
    f.advance(_MINUTE)
    f.put(Message(b"order-4"))
    f.say("order-4 put on the device.")
    f.push("push_once(), and the link drops right after the put's answer:", drop_after_put=True)
    depth = f.fact("drop", "server ORDERS", f.home.depth(ORDERS))
    seen = f.fact("drop", "server ORDERS visible", len(f.visible(ORDERS)))
    f.say(f"{HOME_QM} holds order-4 locked: {ORDERS} depth {depth}, but a browse shows {seen}. The device")
    f.say(f"has no confirm, so it keeps its copy: {DEVICE_QM} {ORDERS} depth "
          f"{f.fact('drop', 'device ORDERS', f.device.depth(ORDERS))}.")
    f.advance(2 * _MINUTE)
    f.server.start()
    f.push("The link is back: the home server starts again. push_once():")
    f.say("The agent put order-4 again, flagged resend: the server replaced its locked copy instead")
    f.say("of storing a second one, and the confirm made it visible.")
    f.say(f"{HOME_QM} {ORDERS} holds {', '.join(f.visible(ORDERS))}; "
          f"{DEVICE_QM} {ORDERS} depth {f.fact('resend', 'device ORDERS', f.device.depth(ORDERS))}.")
    uid = f.result.uids["order-4"]
    puts = sum(x.path == p.PATH_PUT and uid in str(x.sent["messages"]) for x in f.timeline.exchanges)
    accepted = f.fact("resend", "order-4 accepted", f.accepted()["order-4"])
    f.say(f"order-4 crossed the wire {_times(f.fact('resend', 'order-4 puts', puts))}; "
          f"the server's journal accepted it {_times(accepted)}.")


def _reply(f: _Forward) -> None:
    f.step("A reply: the device's home-server queue pulls it from the home server")
    f.advance(_MINUTE)
    got = f.home.get(ORDERS)
    assert got is not None  # order-1 to order-4 are visible there
    f.say(f"The server's application gets from {ORDERS}: {brief(got)},")
    reply = Message(f"{text(got)} shipped".encode()).expire_after(30 * _MINUTE)
    f.result.uids[text(reply)] = str(f.home.put(HELD, reply))
    f.say(f"and puts its reply {text(reply)!r} on {HELD}, with expire_after(30m).")
    f.say("pull_once():")
    report = f.agent.pull_once()
    f.flush()
    f.fact("reply", "received", report.received)
    f.say("An assured get there (locked), an assured put here, then the pull-confirm deletes it there.")
    mine = f.device.get(INBOX)
    assert mine is not None  # the reply, just pulled
    f.say(f"The device's application gets from {INBOX}:")
    f.say(f"  {brief(mine)}")
    f.say(f"{DEVICE_QM} {INBOX} depth {f.fact('reply', 'device INBOX', f.device.depth(INBOX))}; "
          f"{HOME_QM} {HELD} depth {f.fact('reply', 'server ' + HELD, f.home.depth(HELD))}.")


def _expires_twice(f: _Forward) -> None:
    f.step("MQe's \"expires twice\": the expiry passes between put and confirm")
    f.say("MQe's manual: \"Assume that an asynchronous queue has a message on it due to expire at 10:00")
    f.say("1st Jan 2005. [...] Suppose that the first transmission stage occurs at 09:55. [...] Then, if")
    f.say("the network fails until 10:05, the expiry time of the message is missed. Therefore, the message")
    f.say("expires on the remote queue and the queue expiry rule gets fired. Also, in due course, the queue")
    f.say("expiry rule gets fired on the destination queue manager.\" Here it is.")
    f.advance(START_MS + 15 * _MINUTE - f.device_clock())
    deadline = START_MS + 20 * _MINUTE
    f.put(Message(b"order-5").expire_at(deadline))
    f.say(f"order-5 put on the device with expire_at({format_time(deadline)}).")
    f.push("push_once(), and the link drops right after the put's answer:", drop_after_put=True)
    depth = f.fact("twice", "server ORDERS", f.home.depth(ORDERS))
    seen = f.fact("twice", "server ORDERS visible", len(f.visible(ORDERS)))
    f.say(f"The first stage happened: {HOME_QM} holds order-5 locked ({ORDERS} depth {depth}, a browse")
    f.say(f"shows {seen}), due by {clock_time(deadline)} on its own clock too: "
          "its time left crossed the wire.")
    f.say(f"The confirm never came, so the device keeps its copy: {DEVICE_QM} {ORDERS} depth "
          f"{f.fact('twice', 'device ORDERS', f.device.depth(ORDERS))}.")
    f.advance(10 * _MINUTE)
    f.server.start()
    report = f.push("At 10:05 the link is back: the home server starts again. push_once():")
    f.fact("twice", "sent", report.sent)
    f.fact("twice", "reported", report.expiries_reported)
    f.say("Reading its store to transmit, the device found order-5 expired: its rule fired, nothing")
    f.say("was sent, and the expiry went to the server's journal as the device's.")
    f.say("In due course the home server's expiry sweep runs (edgeq serve: every --sweep-interval):")
    f.fact("twice", "swept", f.home.sweep_expired())
    f.flush()
    f.say("Both rules fired for the same message (the same uid): not a duplicate, one message that")
    f.say(f"expired on each side. It was never delivered: {HOME_QM} {ORDERS} holds "
          f"{', '.join(f.visible(ORDERS))}.")
    uid = f.result.uids["order-5"]
    entries = [e for e in f.home.journal_since() if e.uid == uid]
    f.fact("twice", "order-5 delivered", sum(e.kind in ("accepted", "delivered") for e in entries))
    f.say("The server's journal of order-5, nothing accepted or delivered:")
    for e in entries:
        f.say(f"  {e.kind} on the {e.side} at check point '{e.check_point}', {clock_time(e.at_ms)}")


def _entry(kind: str, side: str, check_point: str | None, at_ms: int) -> str:
    where = f" ({side}, '{check_point}')" if kind == "expired" else ""
    return f"{kind} {clock_time(at_ms)}{where}"


def _summary(f: _Forward) -> None:
    f.step("Where things stand (act two)")
    for qm, queues in ((f.device, (ORDERS, INBOX)), (f.home, (ORDERS, HELD))):
        for queue in queues:
            f.say(f"{qm.name:<10} {queue:<16} depth {f.fact('end', f'{qm.name} {queue}', qm.depth(queue))}")
    f.say("The home server's journal, message by message:")
    by_message: dict[str, list[str]] = {}
    for e in f.home.journal_since():
        label = f.label(e.uid)
        by_message.setdefault(label, []).append(_entry(e.kind, e.side, e.check_point, e.at_ms))
        f.result.journal.append((e.kind, e.side, label, e.check_point))
    for label, seen in by_message.items():
        f.say(f"  {label:<16} {', '.join(seen)}")
    f.say("Look at them (opened again, the stores follow the real clock):")
    f.say(f"  edgeq --db {f.result.home_path} browse {ORDERS}")
    f.say(f"  edgeq --db {f.result.home_path} server devices list")
