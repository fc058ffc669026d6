"""Consumer loops and listeners (edgeq.consume.consumers, the verbs in edgeq.manager):
``qm.consume`` and ``qm.listen`` on real SQLite files with real threads. Waits for
another thread's doing are bounded checks of a condition (``until``), never sleeps.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import Message, QueueManager
from edgeq.consume.consumers import Consumer, Listener
from edgeq.crypto import IntegrityError
from edgeq.errors import InvalidArgument, InvalidType, QueueManagerClosed, QueueNotFound
from edgeq.uid import MessageUID
from tests.waits import LONG, until

PROMPT = 2.0


@pytest.fixture
def qm(db_path: Path) -> Iterator[QueueManager]:
    with QueueManager(db_path, name="DEV1") as manager:
        manager.define_queue("Q")
        yield manager


def fill(qm: QueueManager, *data: bytes) -> list[MessageUID]:
    return qm.put_many("Q", [Message(d) for d in data])


def visible(qm: QueueManager) -> list[bytes]:
    return [m.data for m in qm.browse("Q")]


def backouts(qm: QueueManager) -> dict[bytes, int]:
    return {m.data: m.backout_count for m in qm.browse("Q")}


# -- consume ----------------------------------------------------------------------------------


def test_consume_confirms_each_message_when_the_next_is_asked_for(qm: QueueManager) -> None:
    fill(qm, b"a", b"b", b"c")
    seen = []
    for message in qm.consume("Q", wait=0):
        # the message in hand is locked (stored, not visible); those before it are gone
        seen.append((message.data, qm.depth("Q"), visible(qm)))
    assert seen == [(b"a", 3, [b"b", b"c"]), (b"b", 2, [b"c"]), (b"c", 1, [])]
    assert qm.depth("Q") == 0


def test_consume_in_a_with_block_undoes_the_message_an_exception_leaves_with(qm: QueueManager) -> None:
    fill(qm, b"a", b"b")
    with pytest.raises(RuntimeError, match="boom"), qm.consume("Q", wait=0) as messages:
        for message in messages:
            if message.data == b"b":
                raise RuntimeError("boom")
    assert visible(qm) == [b"b"]  # a was confirmed, b undone
    assert backouts(qm) == {b"b": 1}


def test_consume_in_a_with_block_confirms_the_message_break_leaves_with(qm: QueueManager) -> None:
    fill(qm, b"a", b"b")
    taken = []
    with qm.consume("Q", wait=0) as messages:
        for message in messages:
            taken.append(message.data)
            break
    assert taken == [b"a"]
    assert visible(qm) == [b"b"] and qm.depth("Q") == 1
    assert backouts(qm) == {b"b": 0}


@pytest.mark.parametrize("leave", ["break", "raise"])
def test_a_bare_for_loop_left_early_undoes_the_message_in_hand(qm: QueueManager, leave: str) -> None:
    # A generator cannot tell break from an exception: the message is never lost.
    fill(qm, b"a", b"b")

    def loop() -> None:
        for message in qm.consume("Q", wait=0):
            if message.data == b"b":
                if leave == "raise":
                    raise RuntimeError("boom")
                break

    if leave == "raise":
        with pytest.raises(RuntimeError):
            loop()
    else:
        loop()
    assert visible(qm) == [b"b"]
    assert backouts(qm) == {b"b": 1}


def test_close_undoes_the_message_in_hand_and_ends_the_loop(qm: QueueManager) -> None:
    fill(qm, b"a", b"b")
    consumer = qm.consume("Q", wait=0)
    assert next(consumer).data == b"a"
    consumer.close()
    assert list(consumer) == []
    assert visible(qm) == [b"a", b"b"]
    assert backouts(qm) == {b"a": 1, b"b": 0}


def test_consume_without_confirm_takes_each_message_for_good(qm: QueueManager) -> None:
    fill(qm, b"a", b"b")
    with pytest.raises(RuntimeError), qm.consume("Q", wait=0, confirm=False) as messages:
        for message in messages:
            assert qm.depth("Q") == (1 if message.data == b"a" else 0)
            if message.data == b"b":
                raise RuntimeError("gone anyway")
    assert qm.depth("Q") == 0


def test_consume_with_a_filter(qm: QueueManager) -> None:
    qm.put("Q", Message(b"a", fields={"to": "x"}))
    qm.put("Q", Message(b"b", fields={"to": "y"}))
    assert [m.data for m in qm.consume("Q", wait=0, filter={"to": "y"})] == [b"b"]
    assert visible(qm) == [b"a"]


def test_consume_waits_for_messages_and_ends_when_the_wait_passes(qm: QueueManager) -> None:
    got: list[bytes] = []
    ended = threading.Event()

    def consumer() -> None:
        for message in qm.consume("Q", wait=0.5):
            got.append(message.data)
        ended.set()

    thread = threading.Thread(target=consumer, daemon=True)
    thread.start()
    for i in range(3):
        until(lambda: qm._waker.waiting == 1, "the consumer to wait")
        fill(qm, b"%d" % i)
        until(lambda i=i: len(got) == i + 1, "the consumer to take it")  # type: ignore[misc]
    assert ended.wait(LONG)
    assert got == [b"0", b"1", b"2"] and qm.depth("Q") == 0


def test_consume_waits_for_ever_by_default_and_ends_when_the_queue_manager_closes(db_path: Path) -> None:
    qm = QueueManager(db_path, name="DEV1")
    qm.define_queue("Q")
    got: list[bytes] = []
    ended = threading.Event()

    def consumer() -> None:
        for message in qm.consume("Q"):
            got.append(message.data)
        ended.set()

    threading.Thread(target=consumer, daemon=True).start()
    fill(qm, b"a")
    until(lambda: got == [b"a"] and qm._waker.waiting == 1, "the consumer to wait for more")
    closed_at = time.monotonic()
    qm.close()
    assert ended.wait(PROMPT), "the loop did not end when the queue manager closed"
    assert time.monotonic() - closed_at < PROMPT
    with QueueManager(db_path) as again:
        assert again.depth("Q") == 0  # a was confirmed before the consumer waited


def test_closing_the_queue_manager_under_a_loop_body_raises_at_the_next_message(qm: QueueManager) -> None:
    # The message in hand cannot be confirmed any more: that is said, not hidden.
    fill(qm, b"a")
    consumer = qm.consume("Q", wait=0)
    assert next(consumer).data == b"a"
    qm.close()
    with pytest.raises(QueueManagerClosed):
        next(consumer)


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"wait": -1}, InvalidArgument),
    ({"wait": "1s"}, InvalidType),
    ({"confirm": 1}, InvalidType),
    ({"filter": ["to"]}, InvalidType),
])
def test_consume_checks_its_arguments_at_once(
    qm: QueueManager, kwargs: dict[str, object], error: type
) -> None:
    with pytest.raises(error):
        qm.consume("Q", **kwargs)  # type: ignore[arg-type]


def test_consume_returns_a_consumer(qm: QueueManager) -> None:
    consumer = qm.consume("Q", wait=0)
    assert isinstance(consumer, Consumer) and consumer.queue == "Q"
    assert iter(consumer) is consumer


# -- listen -----------------------------------------------------------------------------------


class Inbox:
    """A callback that records what it is given, and can be told to fail or to block."""

    def __init__(self) -> None:
        self.got: list[Message] = []
        self.lock = threading.Lock()
        self.fail_on: set[bytes] = set()  # fail the first time each of these comes
        self.hold = threading.Event()
        self.held = threading.Event()
        self.hold.set()

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.got.append(message)
            fail = message.data in self.fail_on
            self.fail_on.discard(message.data)
        if fail:
            raise ValueError(f"cannot handle {message.data!r}")
        self.held.set()
        assert self.hold.wait(LONG)

    def data(self) -> list[bytes]:
        with self.lock:
            return [m.data for m in self.got]


def test_listen_delivers_each_message_and_confirms_it(qm: QueueManager) -> None:
    inbox = Inbox()
    with qm.listen("Q", inbox) as listener:
        assert isinstance(listener, Listener) and listener.running
        fill(qm, b"a", b"b", b"c")
        until(lambda: listener.delivered == 3, "three deliveries")
        assert qm.depth("Q") == 0
    assert not listener.running and listener.error is None
    assert inbox.data() == [b"a", b"b", b"c"]


def test_a_callback_that_raises_undoes_and_the_listener_carries_on(
    qm: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox()
    inbox.fail_on = {b"a"}
    with caplog.at_level(logging.ERROR, logger="edgeq"), qm.listen("Q", inbox) as listener:
        fill(qm, b"a", b"b")
        until(lambda: listener.delivered == 2, "both delivered, a on its second try")
    assert listener.failed == 1 and listener.error is None
    firsts = [(m.data, m.backout_count) for m in inbox.got]
    assert (b"a", 0) in firsts and (b"a", 1) in firsts  # undone: a backout counted
    assert qm.depth("Q") == 0
    assert "cannot handle b'a'" in caplog.text and "undone" in caplog.text


def test_a_poison_message_goes_to_the_backout_queue_instead_of_spinning(db_path: Path) -> None:
    with QueueManager(db_path, name="DEV1") as qm:
        qm.define_queue("BOQ")
        qm.define_queue("Q", backout_threshold=3, backout_queue="BOQ")
        attempts: list[int] = []

        def always_fails(message: Message) -> None:
            attempts.append(message.backout_count)
            raise ValueError("poison")

        with qm.listen("Q", always_fails) as listener:
            uid = qm.put("Q", Message(b"poison"))
            until(lambda: qm.depth("BOQ") == 1, "the message to reach the backout queue")
        assert attempts == [0, 1, 2] and listener.failed == 3
        assert qm.depth("Q") == 0
        moved = qm.get("BOQ")
        assert moved is not None and moved.uid == uid


def test_many_listener_threads_deliver_each_message_once(qm: QueueManager) -> None:
    inbox = Inbox()
    n = 200
    with qm.listen("Q", inbox, threads=4) as listener:
        sent = set(qm.put_many("Q", [Message(b"%d" % i) for i in range(n)]))
        until(lambda: listener.delivered == n, f"{n} deliveries")
    assert [m.uid for m in inbox.got].__len__() == n
    assert {m.uid for m in inbox.got} == sent
    assert qm.depth("Q") == 0


def test_stop_lets_the_callback_in_progress_finish_and_confirm(qm: QueueManager) -> None:
    inbox = Inbox()
    inbox.hold.clear()
    listener = qm.listen("Q", inbox)
    fill(qm, b"a")
    assert inbox.held.wait(LONG)
    assert listener.stop(timeout=0.05) is False  # still in the callback
    assert qm.depth("Q") == 1
    inbox.hold.set()
    assert listener.stop(timeout=LONG) is True
    assert qm.depth("Q") == 0 and listener.delivered == 1


def test_stop_from_the_callback_itself(qm: QueueManager) -> None:
    stopped: list[bool] = []
    holder: list[Listener] = []
    ready = threading.Event()

    def callback(message: Message) -> None:
        assert ready.wait(LONG)
        stopped.append(holder[0].stop(timeout=LONG))

    holder.append(qm.listen("Q", callback))
    ready.set()
    fill(qm, b"a")
    assert holder[0].join(LONG)
    assert stopped == [True] and qm.depth("Q") == 0


def test_closing_the_queue_manager_stops_listeners_after_the_callback_in_progress(db_path: Path) -> None:
    qm = QueueManager(db_path, name="DEV1")
    qm.define_queue("Q")
    inbox = Inbox()
    inbox.hold.clear()
    idle = qm.listen("Q", lambda m: None, filter={"never": "matches"})
    busy = qm.listen("Q", inbox)
    fill(qm, b"a")
    assert inbox.held.wait(LONG)
    closer = threading.Thread(target=qm.close)
    closer.start()
    until(lambda: qm._waker.closed, "close to begin")
    assert closer.is_alive()  # waiting for the callback
    inbox.hold.set()
    closer.join(LONG)
    assert not closer.is_alive()
    assert idle.join(PROMPT) and busy.join(PROMPT)
    assert idle.error is None and busy.error is None and busy.delivered == 1
    with QueueManager(db_path) as again:
        assert again.depth("Q") == 0  # confirmed before the store closed


def test_without_confirm_a_message_is_taken_before_the_callback(
    qm: QueueManager, caplog: pytest.LogCaptureFixture
) -> None:
    depths: list[int] = []

    def callback(message: Message) -> None:
        depths.append(qm.depth("Q"))
        raise ValueError("lost")

    with caplog.at_level(logging.ERROR, logger="edgeq"), qm.listen("Q", callback, confirm=False) as listener:
        fill(qm, b"a")
        until(lambda: listener.failed == 1, "the failed delivery")
    assert depths == [0] and qm.depth("Q") == 0
    assert "it is gone (confirm=False)" in caplog.text


def test_a_damaged_store_stops_the_listener_with_its_error(qm: QueueManager, db_path: Path) -> None:
    fill(qm, b"a")
    conn = sqlite3.connect(db_path)  # flip the stored data behind edgeq's back: its checksum fails
    with conn:
        conn.execute("UPDATE messages SET data = x'00'")
    conn.close()
    inbox = Inbox()
    listener = qm.listen("Q", inbox)
    assert listener.join(LONG), "the listener kept going on a damaged store"
    assert isinstance(listener.error, IntegrityError)
    assert inbox.got == []
    assert listener.stop(LONG)


def test_a_deleted_queue_stops_the_listener(qm: QueueManager) -> None:
    listener = qm.listen("Q", lambda m: None)
    until(lambda: qm._waker.waiting == 1, "the listener to wait")
    qm.delete_queue("Q")
    assert listener.join(LONG)
    assert isinstance(listener.error, QueueNotFound)


@pytest.mark.parametrize(("queue", "kwargs", "error"), [
    ("NOPE", {}, QueueNotFound),
    ("Q", {"threads": 0}, InvalidArgument),
    ("Q", {"threads": 1.5}, InvalidType),
    ("Q", {"threads": True}, InvalidType),
    ("Q", {"confirm": None}, InvalidType),
    ("Q", {"filter": 3}, InvalidType),
])
def test_listen_checks_its_arguments_before_starting(
    qm: QueueManager, queue: str, kwargs: dict[str, object], error: type
) -> None:
    with pytest.raises(error):
        qm.listen(queue, lambda m: None, **kwargs)  # type: ignore[arg-type]
    assert [t for t in threading.enumerate() if t.name.startswith("edgeq-listen")] == []


def test_listen_refuses_what_cannot_be_got(qm: QueueManager) -> None:
    qm.define_remote_queue("OUT", target_qmgr="HOME")
    with pytest.raises(InvalidArgument, match="remote queue"):
        qm.listen("OUT", lambda m: None)
    with pytest.raises(InvalidType, match="callable"):
        qm.listen("Q", "not callable")  # type: ignore[arg-type]


def test_a_listener_says_what_it_did(qm: QueueManager) -> None:
    with qm.listen("Q", lambda m: None) as listener:
        assert "running" in repr(listener) and listener.queue == "Q"
    assert repr(listener) == "<Listener 'Q' stopped, 0 delivered, 0 failed>"
