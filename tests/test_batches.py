"""Batch paths make a constant number of queries: the SELECTs of a 500-message
``put_each``, ``confirm_put_each``, ``transmitted`` and pull (get + confirm_get) are
as many as those of a 10-message one (counted with the queue manager's tracer)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from pathlib import Path

import pytest

from edgeq import Message, MessageUID, QueueManager

_stamps = count(1_000)


def selects(qm: QueueManager, operation: Callable[[], object]) -> int:
    statements: list[str] = []
    with qm.tracer(statements.append):
        operation()
    return sum(s.lstrip().upper().startswith(("SELECT", "WITH")) for s in statements)


def device_messages(n: int) -> list[Message]:
    """What a home server receives: messages with their device's uids."""
    return [Message(b"m", uid=MessageUID("DEV1:abcd", next(_stamps))) for _ in range(n)]


@pytest.fixture
def home(tmp_path: Path) -> QueueManager:
    qm = QueueManager(tmp_path / "home.db", name="HOME", journal="server")
    qm.define_queue("ORDERS")
    qm.define_queue("DEV1.INBOX", rules=["counters"])  # rules observe: copies are made, still no lookups
    return qm


def server_receives(qm: QueueManager, n: int) -> tuple[int, int]:
    """SELECTs of the two stages of one push of ``n`` messages."""
    batch = device_messages(n)
    put = selects(qm, lambda: qm.put_each("ORDERS", batch, confirm_id=7))
    confirm = selects(qm, lambda: qm.confirm_put_each("ORDERS", [m.uid for m in batch if m.uid is not None]))
    return put, confirm


def test_a_push_costs_the_same_queries_for_10_or_500_messages(home: QueueManager) -> None:
    server_receives(home, 3)  # activation and first-use costs out of the way
    small = server_receives(home, 10)
    large = server_receives(home, 500)
    assert large == small
    assert home.depth("ORDERS") == 513


def test_a_resent_batch_is_looked_up_in_constant_queries(home: QueueManager) -> None:
    batch = device_messages(500)
    home.put_each("ORDERS", batch, confirm_id=1)
    home.confirm_put_each("ORDERS", [m.uid for m in batch if m.uid is not None])
    small = device_messages(10)
    home.put_each("ORDERS", small, confirm_id=2)
    again = [m.replace(resend=True) for m in batch]
    resend_small = [m.replace(resend=True) for m in small]
    assert selects(home, lambda: home.put_each("ORDERS", again, confirm_id=3)) == selects(
        home, lambda: home.put_each("ORDERS", resend_small, confirm_id=4))
    assert {r.status for r in home.put_each("ORDERS", again, confirm_id=5)} == {"duplicate"}


def test_a_pull_costs_the_same_queries_for_10_or_500_messages(home: QueueManager, tmp_path: Path) -> None:
    device = QueueManager(tmp_path / "device.db", name="DEV1")
    device.define_home_server_queue("INBOX", server="HOME")

    def pull(n: int) -> tuple[int, int, int]:
        home.put_many("DEV1.INBOX", [Message(b"p") for _ in range(n)])
        got: list[Message] = []
        take = selects(home, lambda: got.extend(home.get_many("DEV1.INBOX", n, confirm_id=9)))
        store = selects(device, lambda: device.confirm_put_each(
            "INBOX",
            [r.uid for r in device.put_each("INBOX", [m.replace(resend=True) for m in got], confirm_id=3)]))
        done = selects(home,
                       lambda: home.confirm_get_each("DEV1.INBOX", [m.uid for m in got if m.uid is not None]))
        return take, store, done

    pull(3)
    assert pull(500) == pull(10)
    assert device.depth("INBOX") == 513 and home.depth("DEV1.INBOX") == 0
    device.close()


def test_transmitted_costs_the_same_queries_for_10_or_500_messages(tmp_path: Path) -> None:
    device = QueueManager(tmp_path / "device.db", name="DEV1")
    device.define_remote_queue("ORDERS", target_qmgr="HOME")

    def transmit(n: int) -> int:
        uids = device.put_many("ORDERS", [Message(b"t") for _ in range(n)])
        return selects(device, lambda: device.exchange.transmitted("ORDERS", uids))

    transmit(3)
    assert transmit(500) == transmit(10)
    assert device.depth("ORDERS") == 0
    device.close()
