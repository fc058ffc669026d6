"""edgeq.exchange.holds: assured puts left unconfirmed, measured, listed and undone by sender
(the queue manager name in a uid's origin, any incarnation)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import count

import pytest

from edgeq import Int32, ManualClock, Message, MessageUID, QueueManager
from edgeq.errors import InvalidArgument, InvalidType, QueueNotFound
from edgeq.exchange.holds import HeldGroup, HeldUsage
from edgeq.queues.checkpoints import DISCARD_BATCH
from edgeq.store.rows import SEAL_OVERHEAD
from tests.conftest import T0, Recorder

_stamps = count(1_000)


def sent(origin: str, n: int, data: bytes = b"12345", **options: object) -> list[Message]:
    """``n`` messages as a home server receives them: with their sender's uids."""
    return [Message(data, uid=MessageUID(origin, next(_stamps)), created_ms=T0,
                    **options)  # type: ignore[arg-type]
            for _ in range(n)]


@pytest.fixture
def size(store_mode: str) -> Callable[[int], int]:
    """The bytes a message of ``n`` data bytes (no fields) takes as stored: sealed, or not."""
    return lambda n: n + (SEAL_OVERHEAD if store_mode == "encrypted" else 0)


@pytest.fixture
def home(open_qm: Callable[..., QueueManager]) -> QueueManager:
    qm = open_qm(name="HOME")
    qm.define_queue("ORDERS")
    qm.define_queue("TELEMETRY")
    return qm


def held_put(qm: QueueManager, queue: str, messages: list[Message], confirm_id: int = 7) -> None:
    assert {r.status for r in qm.put_each(queue, messages, confirm_id=confirm_id)} == {"stored"}


def test_usage_counts_every_incarnation_of_a_sender_and_no_other_sender(
    home: QueueManager, clock: ManualClock, size: Callable[[int], int]
) -> None:
    held_put(home, "ORDERS", sent("DEV1:aaaa", 3))
    clock.advance(1_000)
    held_put(home, "TELEMETRY", sent("DEV1:bbbb", 2) + sent("DEV1", 1))  # a new store, and a legacy origin
    # Names that merely start with DEV1 are other senders (they sort inside the index range).
    held_put(home, "ORDERS",
             sent("DEV10:aaaa", 4) + sent("DEV1-X:aaaa", 1) + sent("DEV1.A", 1) + sent("DEV", 1))
    assert home.exchange.held_usage("DEV1") == HeldUsage(6, 6 * size(5), T0)
    assert home.exchange.held_usage("DEV10") == HeldUsage(4, 4 * size(5), T0 + 1_000)
    assert home.exchange.held_usage("DEV1-X").messages == home.exchange.held_usage("DEV1.A").messages == 1
    assert home.exchange.held_usage("DEV").messages == 1
    assert home.exchange.held_usage("DEV2") == HeldUsage(0, 0, None)


def test_confirmed_and_plain_puts_are_not_held(home: QueueManager) -> None:
    batch = sent("DEV1:aaaa", 4)
    held_put(home, "ORDERS", batch)
    home.confirm_put_each("ORDERS", [m.uid for m in batch[:3] if m.uid is not None])
    home.put_each("ORDERS", sent("DEV1:aaaa", 5))  # no confirm id: visible at once
    assert home.exchange.held_usage("DEV1").messages == 1


def test_usage_among_uids_is_what_a_queue_holds_of_them(
    home: QueueManager, size: Callable[[int], int]
) -> None:
    batch = sent("DEV1:aaaa", 5, b"x" * 10)
    held_put(home, "ORDERS", batch[:3])
    held_put(home, "TELEMETRY", batch[3:])
    uids = [m.uid for m in batch if m.uid is not None]
    assert home.exchange.held_usage("DEV1", queue="ORDERS", uids=uids) == HeldUsage(3, 3 * size(10))
    assert (home.exchange.held_usage("DEV1", queue="TELEMETRY", uids=[str(u) for u in uids])
            == HeldUsage(2, 2 * size(10)))
    assert home.exchange.held_usage("DEV1", queue="ORDERS", uids=[]) == HeldUsage(0, 0)
    with pytest.raises(QueueNotFound):
        home.exchange.held_usage("DEV1", queue="NOPE", uids=uids)
    with pytest.raises(InvalidArgument, match="together"):
        home.exchange.held_usage("DEV1", queue="ORDERS")


def test_usage_among_uids_costs_the_same_queries_for_10_or_5000(home: QueueManager) -> None:
    def selects(n: int) -> int:
        batch = sent("DEV1:aaaa", n)
        held_put(home, "ORDERS", batch)
        statements: list[str] = []
        with home.tracer(statements.append):
            home.exchange.held_usage("DEV1", queue="ORDERS", uids=[m.uid for m in batch if m.uid is not None])
        return sum(s.lstrip().upper().startswith("SELECT") for s in statements)

    selects(3)  # first-use costs out of the way
    assert selects(10) == selects(5_000) == 2  # the queue, then the uids in one query


def test_held_puts_are_grouped_by_sender_and_queue_with_the_oldest(
    home: QueueManager, clock: ManualClock, size: Callable[[int], int]
) -> None:
    held_put(home, "ORDERS", sent("DEV1:aaaa", 2))
    clock.advance(60_000)
    held_put(home, "ORDERS", sent("DEV1:bbbb", 1, b"abc") + sent("DEV2:cccc", 1))
    held_put(home, "TELEMETRY", sent("DEV1:bbbb", 1))
    assert home.exchange.held_puts() == [
        HeldGroup("DEV1", "ORDERS", 3, 2 * size(5) + size(3), T0),
        HeldGroup("DEV1", "TELEMETRY", 1, size(5), T0 + 60_000),
        HeldGroup("DEV2", "ORDERS", 1, size(5), T0 + 60_000),
    ]
    assert home.exchange.held_puts("DEV2") == [HeldGroup("DEV2", "ORDERS", 1, size(5), T0 + 60_000)]
    assert home.exchange.held_puts(older_than_ms=30_000) == [HeldGroup("DEV1", "ORDERS", 2, 2 * size(5), T0)]
    assert home.exchange.held_puts(older_than_ms=60_000)[0].messages == 2  # held exactly that long counts
    assert home.exchange.held_puts(older_than_ms=60_001) == []


def test_undo_removes_old_holds_as_deleted_and_a_resend_is_stored_afresh(
    home: QueueManager, clock: ManualClock
) -> None:
    rules = Recorder()
    home.add_rule("ORDERS", rules)
    old, young = sent("DEV1:aaaa", 3), sent("DEV1:aaaa", 1)
    held_put(home, "ORDERS", old)
    clock.advance(30_000)
    held_put(home, "ORDERS", young + sent("DEV2:bbbb", 1))
    rules.events.clear()
    assert home.exchange.undo_held_puts("DEV1", older_than_ms=30_000) == 3
    assert rules.removed() == [(b"12345", "deleted")] * 3
    assert ((home.exchange.held_usage("DEV1").messages, home.exchange.held_usage("DEV2").messages,
             home.depth("ORDERS"))
            == (1, 1, 2))
    # Never confirmed, so never remembered: the resend is stored, then confirmed, once.
    again = [m.replace(resend=True) for m in old]
    assert [r.status for r in home.put_each("ORDERS", again, confirm_id=9)] == ["stored"] * 3
    assert ([r.status for r in home.confirm_put_each("ORDERS", [m.uid for m in old if m.uid])]
            == ["confirmed"] * 3)
    assert home.exchange.undo_held_puts() == 2  # every sender, any age
    assert [m.uid for m in home.browse("ORDERS")] == [m.uid for m in old]


def test_a_hold_that_expired_meanwhile_is_discarded_as_expired(
    home: QueueManager, clock: ManualClock
) -> None:
    rules = Recorder()
    home.add_rule("ORDERS", rules)
    held_put(home, "ORDERS",
             sent("DEV1:aaaa", 1, b"short", expiry=Int32(1_000)) + sent("DEV1:aaaa", 1, b"long"))
    clock.advance(5_000)
    assert home.exchange.undo_held_puts("DEV1") == 2
    assert (rules.expired(), rules.removed()) == ([(b"short", "sweep")], [(b"long", "deleted")])


def test_undo_goes_a_batch_per_transaction_until_none_is_left(home: QueueManager) -> None:
    held_put(home, "ORDERS", sent("DEV1:aaaa", DISCARD_BATCH + 5))
    held_put(home, "TELEMETRY", sent("DEV1:aaaa", 5))
    statements: list[str] = []
    with home.tracer(statements.append):
        assert home.exchange.undo_held_puts("DEV1") == DISCARD_BATCH + 10
    assert sum(s.startswith("BEGIN IMMEDIATE") for s in statements) == 2
    assert home.exchange.held_puts() == [] and home.depth("ORDERS") == home.depth("TELEMETRY") == 0


def test_arguments_are_checked(home: QueueManager) -> None:
    with pytest.raises(InvalidArgument, match="not valid"):
        home.exchange.held_puts("DEV 1")
    with pytest.raises(InvalidType, match="str"):
        home.exchange.held_usage(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="0 or more"):
        home.exchange.undo_held_puts(older_than_ms=-1)
    with pytest.raises(InvalidType, match="older_than_ms must be an int of 0 or more"):
        home.exchange.held_puts(older_than_ms=1.5)  # type: ignore[arg-type]
