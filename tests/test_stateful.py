"""A Hypothesis state machine: random operations on a queue against a reference model.

The model is written from edgeq's documented semantics (MQe's expiry check
points), not from its code:

* order: priority 9..0 then arrival on a priority queue, arrival only on a FIFO
  one; a confirmed assured put arrives at confirm time; an undone assured get
  goes back to its place with ``backout_count + 1``, and a get passes it by until
  its redelivery delay has passed (the queue's first delay doubling per backout up
  to its longest; never past its deadline; browse and depth still see it);
* a message is expired iff its deadline <= now. Deadline: ``created + Int32``,
  or the ``Int64`` itself, or (no own expiry) ``arrived + queue expiry_ms``;
  ``cap_expiry_ms`` bounds it to ``arrived + cap`` at put;
* put discards an already-expired message (``add``), never storing it; get
  discards expired visible messages met before the first live one (``get``);
  browse discards every expired visible one (``browse``); depth, sweep and
  activation discard every expired message in any state (``depth``,
  ``sweep``, ``activate``); the first use of a queue after the queue manager
  opens activates it; confirm_get/confirm_put of an expired locked message
  discard it (``get``/``add``) and raise MessageExpired;
* confirming a put again is a no-op, also once the message has left the
  queue (confirmed uids are remembered, a day by default); confirming a put
  never made (or undone, or discarded before its confirm) raises
  MessageNotFound; sweep_expired counts the discards of the activation that a
  queue's first use triggers (rules still see ``activate`` for those);
* the flash budget (docs/storage.md): a put that would take the queue past
  ``max_depth`` messages or ``max_bytes`` bytes (data plus fields, in any state)
  first discards every expired message (``add``), then by ``on_full``: reject
  (QueueFull), or discard ready messages oldest first, or lowest priority then
  oldest (only those of the new message's priority or lower); if that cannot make
  room, or the message alone exceeds ``max_bytes`` (MessageTooLarge), the put
  is refused and nothing at all changes. Rules see each discard as ``removed``
  with reason ``overflow``.

After every step the store's rows (uid, state, backout count) must equal the
model's, the queue's kept depth and bytes must equal its rows', and the rule must
have seen exactly the model's expiries and overflow discards.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from edgeq import Int32, Int64, ManualClock, Message, MessageUID, QueueManager, rules
from edgeq.errors import ConfirmIdNotFound, MessageExpired, MessageNotFound, MessageTooLarge, QueueFull
from edgeq.types import ON_FULL, OnFull, Where
from tests.conftest import T0

READY, PUT_LOCKED, GET_LOCKED = "ready", "put-locked", "get-locked"
_DB_STATES = {0: READY, 1: PUT_LOCKED, 2: GET_LOCKED}
CONFIRM_IDS = st.integers(1, 3)  # few, so ids are reused and collide
PRIORITIES = st.none() | st.integers(0, 9)
#: a message's own expiry: relative ms (Int32), or absolute as ms from now (Int64; <= 0 is expired already)
EXPIRIES = (
    st.none()
    | st.tuples(st.just("rel"), st.integers(1, 80))
    | st.tuples(st.just("abs"), st.integers(-20, 80))
)
DEFAULT_PRIORITY = 4


class ExpiryLog(rules.QueueRule):
    """Records which messages were discarded as expired, and where; and which overflowed."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str]] = Counter()
        self.overflowed: Counter[str] = Counter()

    def on_removed(self, event: Any) -> None:
        if event.reason == "overflow":
            self.overflowed[str(event.message.uid)] += 1

    def on_expired(self, event: Any, where: Where | None = None) -> None:
        # Either hook signature: on_expired(event) with event.message and
        # event.where (edgeq.rules.RuleEvent), or on_expired(message, where).
        message = event if where is not None else event.message
        where = where if where is not None else event.where
        assert isinstance(message, Message)
        self.seen[(str(message.uid), str(where))] += 1


@dataclass
class Msg:
    """The model of one stored message."""

    uid: str
    data: bytes
    priority: int
    created: int
    deadline: int | None
    seq: int
    state: str = READY
    confirm_id: int | None = None
    backout: int = 0
    not_before: int | None = None  # an undone get's redelivery time (None: none set)

    @property
    def size(self) -> int:
        return len(self.data)  # no fields: data plus fields is the data


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="edgeq-stateful-")
        self.path = Path(self.dir) / "device.db"
        self.clock = ManualClock(T0)
        self.log = ExpiryLog()
        self.qm: QueueManager | None = None
        # the model
        self.msgs: dict[str, Msg] = {}
        self.expected: Counter[tuple[str, str]] = Counter()
        self.expected_overflow: Counter[str] = Counter()
        self.active = False
        self.seq = 0
        self.counter = 0
        self.last_stamp = 0
        self.uids: list[str] = []  # every uid ever returned, for confirms of gone messages
        self.confirmed_puts: set[str] = set()  # remembered (a day, by default) once confirmed
        self.expiry_ms: int | None = None
        self.cap_ms: int | None = None
        self.fifo = False
        self.max_depth: int | None = None
        self.max_bytes: int | None = None
        self.on_full: OnFull = "reject"
        self.redelivery: tuple[int, int] = (0, 1)  # the queue's first and longest redelivery delay

    # -- set-up and tear-down ---------------------------------------------------------

    @initialize(
        expiry_ms=st.none() | st.integers(1, 60),
        cap_ms=st.none() | st.integers(1, 90),
        fifo=st.booleans(),
        max_depth=st.none() | st.integers(1, 6),
        max_bytes=st.none() | st.integers(3, 14),
        on_full=st.sampled_from(ON_FULL),
        redelivery=st.tuples(st.integers(0, 20), st.integers(0, 40)),
    )
    def open_store(
        self, expiry_ms: int | None, cap_ms: int | None, fifo: bool, max_depth: int | None,
        max_bytes: int | None, on_full: OnFull, redelivery: tuple[int, int],
    ) -> None:
        self.expiry_ms, self.cap_ms, self.fifo = expiry_ms, cap_ms, fifo
        self.max_depth, self.max_bytes, self.on_full = max_depth, max_bytes, on_full
        self.redelivery = (redelivery[0], max(1, redelivery[0] + redelivery[1]))
        self.qm = QueueManager(self.path, name="DEV1", clock=self.clock, durability="normal")
        self.qm.define_queue(
            "Q", expiry_ms=expiry_ms, cap_expiry_ms=cap_ms, ordering="fifo" if fifo else "priority",
            max_depth=max_depth, max_bytes=max_bytes, on_full=on_full, redelivery_delay_ms=self.redelivery[0],
            max_redelivery_delay_ms=self.redelivery[1],
        )
        self.qm.add_rule("Q", self.log)

    def teardown(self) -> None:
        if self.qm is not None:
            self.qm.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model's verbs ------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.clock()

    def _expired(self, m: Msg) -> bool:
        return m.deadline is not None and m.deadline <= self.now

    def _order(self, m: Msg) -> tuple[int, int]:
        return (0 if self.fifo else -m.priority, m.seq)

    def _visible(self) -> list[Msg]:
        return sorted((m for m in self.msgs.values() if m.state == READY), key=self._order)

    def _discard(self, msgs: list[Msg], where: str) -> int:
        for m in msgs:
            del self.msgs[m.uid]
            self.expected[(m.uid, where)] += 1
        return len(msgs)

    def _discard_all_expired(self, where: str) -> int:
        return self._discard([m for m in self.msgs.values() if self._expired(m)], where)

    def _touch(self) -> int:
        """First use since the queue manager opened activates the queue; how many it discarded."""
        if self.active:
            return 0
        self.active = True
        return self._discard_all_expired("activate")

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _check_message(self, got: Message | None, want: Msg | None) -> None:
        if want is None:
            assert got is None, f"expected no message, got {got!r}"
            return
        assert got is not None, f"expected {want}, got None"
        assert str(got.uid) == want.uid and got.data == want.data, (got, want)
        assert got.priority == want.priority
        assert got.created_ms == want.created
        assert got.backout_count == want.backout, (got, want)
        remaining = None if want.deadline is None else want.deadline - self.now
        assert got.remaining_expiry_ms == remaining, (got, want, self.now)

    @property
    def live(self) -> QueueManager:
        assert self.qm is not None
        return self.qm

    # -- rules ------------------------------------------------------------------------

    # Hypothesis picks rules uniformly, so the busiest verbs get several rules.

    @rule(priority=PRIORITIES, expiry=EXPIRIES)
    def put(self, priority: int | None, expiry: tuple[str, int] | None) -> None:
        self._put(priority, expiry, None)

    @rule(priority=PRIORITIES, expiry=EXPIRIES)
    def put_more(self, priority: int | None, expiry: tuple[str, int] | None) -> None:
        self._put(priority, expiry, None)

    @rule(priority=PRIORITIES, expiry=EXPIRIES, confirm_id=CONFIRM_IDS)
    def put_assured(self, priority: int | None, expiry: tuple[str, int] | None, confirm_id: int) -> None:
        self._put(priority, expiry, confirm_id)

    def _put(self, priority: int | None, expiry: tuple[str, int] | None, confirm_id: int | None) -> None:
        self.counter += 1
        data = b"m%d" % self.counter
        now = self.now
        own_expiry: Int32 | Int64 | None = None
        own_deadline = None
        if expiry is not None and expiry[0] == "rel":
            own_expiry, own_deadline = Int32(expiry[1]), now + expiry[1]
        elif expiry is not None:
            own_expiry = Int64(now + expiry[1])
            own_deadline = int(own_expiry)
        deadline = own_deadline
        if deadline is None and self.expiry_ms is not None:
            deadline = now + self.expiry_ms
        if self.cap_ms is not None:
            deadline = now + self.cap_ms if deadline is None else min(deadline, now + self.cap_ms)

        try:
            uid = self.live.put("Q", Message(data, priority=priority, expiry=own_expiry),
                                confirm_id=confirm_id)
            raised: type[Exception] | None = None
        except (QueueFull, MessageTooLarge) as exc:
            raised = type(exc)
        self._touch()
        m = Msg("", data, DEFAULT_PRIORITY if priority is None else priority, now, deadline, self._next_seq())
        if not self._expired(m):
            refusal = self._make_room(m)
            assert raised is refusal, f"put of {m} raised {raised}, the model says {refusal}"
            if refusal is not None:
                return
        assert raised is None, f"put of expired {m} raised {raised}"
        assert isinstance(uid, MessageUID) and uid.qmgr == "DEV1" and uid.origin == self.qm.origin
        assert uid.stamp > self.last_stamp, "uid stamps must strictly increase"
        self.last_stamp = uid.stamp
        key = m.uid = str(uid)
        self.uids.append(key)
        if self._expired(m):
            self.expected[(key, "add")] += 1  # never stored
            return
        if confirm_id is not None:
            m.state, m.confirm_id = PUT_LOCKED, confirm_id
        self.msgs[key] = m

    def _fits(self, m: Msg, held: list[Msg]) -> bool:
        return (self.max_depth is None or len(held) + 1 <= self.max_depth) and (
            self.max_bytes is None or sum(x.size for x in held) + m.size <= self.max_bytes)

    def _make_room(self, m: Msg) -> type[Exception] | None:
        """Make room for ``m`` as the budget documents; the error its put raises (and then
        nothing changed), or None."""
        held = list(self.msgs.values())
        if self._fits(m, held):
            return None
        if self.max_bytes is not None and m.size > self.max_bytes:
            return MessageTooLarge
        expired = [x for x in held if self._expired(x)]
        held = [x for x in held if not self._expired(x)]
        gone: list[Msg] = []
        if not self._fits(m, held):
            if self.on_full == "reject":
                return QueueFull
            ready = sorted((x for x in held if x.state == READY), key=lambda x: (
                x.priority if self.on_full == "discard-lowest-priority" else 0, x.seq))
            for x in ready:
                if self.on_full == "discard-lowest-priority" and x.priority > m.priority:
                    break
                gone.append(x)
                if self._fits(m, [y for y in held if y not in gone]):
                    break
            if not self._fits(m, [y for y in held if y not in gone]):
                return QueueFull  # the put is refused whole: nothing was discarded
        self._discard(expired, "add")
        for x in gone:
            del self.msgs[x.uid]
            self.expected_overflow[x.uid] += 1
        return None

    @rule()
    def get(self) -> None:
        self._get(None)

    @rule(confirm_id=CONFIRM_IDS)
    def get_assured(self, confirm_id: int) -> None:
        self._get(confirm_id)

    def _get(self, confirm_id: int | None) -> None:
        assured = confirm_id is not None
        got = self.live.get("Q", confirm_id=confirm_id)
        self._touch()
        want = None
        for m in self._visible():
            if m.not_before is not None and m.not_before > self.now:
                continue  # waiting out its redelivery delay: a get passes it by
            if self._expired(m):
                self._discard([m], "get")
                continue
            want = m
            break
        self._check_message(got, want)
        if want is not None:
            if assured:
                want.state, want.confirm_id = GET_LOCKED, confirm_id
            else:
                del self.msgs[want.uid]

    def _pick(self, pick: int, prefer: str) -> str | None:
        preferred = sorted(u for u, m in self.msgs.items() if m.state == prefer)
        pool = preferred or self.uids
        return pool[pick % len(pool)] if pool else None

    @rule(pick=st.integers(0, 1000), prefer=st.sampled_from([GET_LOCKED, GET_LOCKED, READY]))
    def confirm_get(self, pick: int, prefer: str) -> None:
        uid = self._pick(pick, prefer)
        if uid is None:
            return
        try:
            self.live.confirm_get("Q", uid)
            raised: type[Exception] | None = None
        except (MessageExpired, MessageNotFound) as exc:
            raised = type(exc)
        self._touch()
        m = self.msgs.get(uid)
        if m is None or m.state != GET_LOCKED:
            assert raised is MessageNotFound, f"confirm_get({uid}) of {m} raised {raised}"
        elif self._expired(m):
            self._discard([m], "get")
            assert raised is MessageExpired, f"confirm_get({uid}) of expired {m} raised {raised}"
        else:
            del self.msgs[uid]
            assert raised is None, f"confirm_get({uid}) of {m} raised {raised}"

    @rule(pick=st.integers(0, 1000), prefer=st.sampled_from([PUT_LOCKED, PUT_LOCKED, READY]))
    def confirm_put(self, pick: int, prefer: str) -> None:
        uid = self._pick(pick, prefer)
        if uid is None:
            return
        try:
            self.live.confirm_put("Q", uid)
            raised: type[Exception] | None = None
        except (MessageExpired, MessageNotFound) as exc:
            raised = type(exc)
        self._touch()
        m = self.msgs.get(uid)
        if m is None and uid in self.confirmed_puts:
            assert raised is None, f"confirm_put({uid}) of a confirmed, since gone, message raised {raised}"
        elif m is None:
            assert raised is MessageNotFound, f"confirm_put({uid}) of a gone message raised {raised}"
        elif m.state != PUT_LOCKED:
            assert raised is None, f"confirm_put({uid}) of confirmed {m} must be a no-op, raised {raised}"
        elif self._expired(m):
            self._discard([m], "add")
            assert raised is MessageExpired, f"confirm_put({uid}) of expired {m} raised {raised}"
        else:
            m.state, m.confirm_id, m.seq = READY, None, self._next_seq()
            self.confirmed_puts.add(uid)
            assert raised is None, f"confirm_put({uid}) of {m} raised {raised}"

    @rule(confirm_id=CONFIRM_IDS)
    def undo(self, confirm_id: int) -> None:
        try:
            count: int | None = self.live.undo("Q", confirm_id)
        except ConfirmIdNotFound:
            count = None
        self._touch()
        mine = [m for m in self.msgs.values() if m.confirm_id == confirm_id]
        assert count == (len(mine) or None), f"undo({confirm_id}) returned {count}, model has {mine}"
        for m in mine:
            if m.state == GET_LOCKED:
                m.state, m.confirm_id, m.backout = READY, None, m.backout + 1
                first, most = self.redelivery  # doubling per backout, never past its deadline
                delay = min(first * 2 ** (m.backout - 1), most)
                at = self.now + delay if m.deadline is None else min(self.now + delay, m.deadline)
                m.not_before = None if delay == 0 else at
            else:
                del self.msgs[m.uid]

    @rule(limit=st.none() | st.integers(1, 5))
    def browse(self, limit: int | None) -> None:
        got = self.live.browse("Q", limit=limit)
        self._touch()
        self._discard([m for m in self._visible() if self._expired(m)], "browse")
        want = self._visible()[:limit]
        assert [str(m.uid) for m in got] == [m.uid for m in want]
        for g, w in zip(got, want, strict=True):
            self._check_message(g, w)

    @rule()
    def depth(self) -> None:
        got = self.live.depth("Q")
        self._touch()
        self._discard_all_expired("depth")
        assert got == len(self.msgs)

    @rule(every_queue=st.booleans())
    def sweep(self, every_queue: bool) -> None:
        got = self.live.sweep_expired() if every_queue else self.live.sweep_expired("Q")
        # Discards by the activation a first use triggers count as swept too.
        activated = self._touch()
        assert got == activated + self._discard_all_expired("sweep")

    @rule()
    def activate(self) -> None:
        got = self.live.activate("Q")
        self.active = True
        assert got == self._discard_all_expired("activate")

    @rule(ms=st.integers(0, 25))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(ms=st.integers(1, 30))
    def clock_steps_back(self, ms: int) -> None:
        self.clock.set(self.now - ms)

    @rule()
    def reopen(self) -> None:
        self.live.close()
        self.qm = QueueManager(self.path, name="DEV1", clock=self.clock, durability="normal")
        self.qm.add_rule("Q", self.log)
        self.active = False

    # -- after every step ---------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        if self.qm is None:
            return
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "SELECT origin, stamp, state, backout_count, not_before FROM messages").fetchall()
            (depth, held) = conn.execute("SELECT depth, bytes FROM queues WHERE name = 'Q'").fetchone()
            (size,) = conn.execute(
                "SELECT ifnull(sum(length(data) + ifnull(length(fields), 0)), 0) FROM messages").fetchone()
        finally:
            conn.close()
        stored = {f"{o}.{s}": (_DB_STATES[state], backout, at) for o, s, state, backout, at in rows}
        model = {u: (m.state, m.backout, m.not_before) for u, m in self.msgs.items()}
        assert stored == model, f"store {stored} != model {model}"
        assert depth == len(rows)
        assert held == size, f"the queue keeps {held} bytes, its rows hold {size}"

    @invariant()
    def rule_saw_exactly_the_expected_expiries(self) -> None:
        assert self.log.seen == self.expected, f"rule saw {dict(self.log.seen)}, model {dict(self.expected)}"

    @invariant()
    def rule_saw_exactly_the_expected_overflow(self) -> None:
        assert self.log.overflowed == self.expected_overflow, (
            f"rule saw overflow of {dict(self.log.overflowed)}, model {dict(self.expected_overflow)}")


QueueMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueMachine = QueueMachine.TestCase
