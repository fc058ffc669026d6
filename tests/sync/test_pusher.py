"""The agent's push, against a scripted server: chunks under the body limit, refusals,
what it remembers between pushes, a put made again when the clock bounds restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from edgeq.sync import protocol as p
from edgeq.sync.expiries import ExpiryReporter
from edgeq.sync.link import ServerLink
from edgeq.sync.push import Pusher
from edgeq.sync.transport import SyncError

from edgeq import Int32, ManualClock, Message, QueueManager

from .conftest import T0
from .fakehome import FakeHome, refusal, results


@pytest.fixture
def make_pusher(make_link: Callable[..., ServerLink]) -> Iterator[Callable[..., Pusher]]:
    made: list[Pusher] = []

    def _make(**options: Any) -> Pusher:
        link = make_link(**options)
        pusher = Pusher(link, ExpiryReporter(link))
        made.append(pusher)
        return pusher

    yield _make
    for pusher in made:
        pusher.close()


def accept_all(fake_home: FakeHome) -> None:
    fake_home.handlers[p.PATH_PUT] = lambda body: {"type": "put", "results": results(body["messages"], "stored")}
    fake_home.handlers[p.PATH_CONFIRM] = lambda body: {"type": "confirm", "results": results(body["uids"], "confirmed")}


def test_a_batch_is_cut_under_the_body_limit_and_a_message_too_large_stays(
    make_pusher: Callable[..., Pusher], fake_home: FakeHome, device_qm: QueueManager
) -> None:
    fake_home.max_body_bytes = 4096  # chunks of at most 90 % of it
    accept_all(fake_home)
    device_qm.put_many("ORDERS", [Message(b"x" * 1000) for _ in range(6)])
    big = device_qm.put("ORDERS", Message(b"y" * 5000))

    report = make_pusher().push_once()

    assert (report.ok, report.transmitted, report.refused, report.batches) == (True, 6, 1, 1)
    assert report.refusals == [(str(big), "larger than the server's request limit (3686 bytes)")]
    puts = fake_home.bodies(p.PATH_PUT)
    assert [len(b["messages"]) for b in puts] == [3, 3]
    assert all(len(p.encode_body(b)) < 3686 for b in puts)
    assert [m.uid for m in device_qm.next_for_transmission("ORDERS", 10)] == [big]  # kept here


def test_what_the_server_expired_is_never_put_again_and_unknown_is_requeued(
    make_pusher: Callable[..., Pusher], fake_home: FakeHome, device_qm: QueueManager
) -> None:
    first, doomed = device_qm.put_many("ORDERS", [Message(b"a"), Message(b"b")])
    fake_home.handlers[p.PATH_PUT] = lambda body: {"type": "put", "results": results(
        body["messages"], lambda m: "expired" if m["u"] == str(doomed) else "stored")}
    fake_home.handlers[p.PATH_CONFIRM] = lambda body: {"type": "confirm", "results": results(body["uids"], "unknown")}
    pusher = make_pusher()

    report = pusher.push_once()
    assert (report.transmitted, report.expired, report.requeued) == (0, 1, 1)
    accept_all(fake_home)
    again = pusher.push_once()

    assert again.transmitted == 1 and pusher.last is again
    assert [[m["u"] for m in b["messages"]] for b in fake_home.bodies(p.PATH_PUT)] == [
        [str(first), str(doomed)], [str(first)]]
    assert all(m["r"] for b in fake_home.bodies(p.PATH_PUT) for m in b["messages"])  # recovering: resends


def test_a_put_whose_answer_restarts_the_clock_bounds_is_made_again_before_its_confirm(
    make_pusher: Callable[..., Pusher], fake_home: FakeHome, device_qm: QueueManager, server_clock: ManualClock
) -> None:
    def stepping_put(body: dict[str, Any]) -> dict[str, Any]:
        if len(fake_home.bodies(p.PATH_PUT)) == 1:
            server_clock.advance(3_600_000)  # the server's clock steps while the first put is there
            return {"type": "put", "results": results(body["messages"], "stored")}
        return {"type": "put", "results": results(body["messages"], "replaced")}

    accept_all(fake_home)
    fake_home.handlers[p.PATH_PUT] = stepping_put
    device_qm.put_many("ORDERS", [Message(b"a", expiry=Int32(60_000)), Message(b"b")])

    report = make_pusher().push_once()

    assert (report.transmitted, report.sent) == (2, 4)
    assert fake_home.paths() == [p.PATH_HELLO, p.PATH_PUT, p.PATH_PUT, p.PATH_CONFIRM]
    first, second = fake_home.bodies(p.PATH_PUT)
    assert first["server_ms"] == T0 and second["server_ms"] == T0 + 3_600_000  # rebased on the new bounds
    assert all(m["r"] for m in second["messages"])


def test_a_forbidden_queue_does_not_stop_the_others(
    make_pusher: Callable[..., Pusher], fake_home: FakeHome, device_qm: QueueManager
) -> None:
    accept_all(fake_home)
    allowed = fake_home.handlers[p.PATH_PUT]
    fake_home.handlers[p.PATH_PUT] = lambda body: (
        refusal(403, "forbidden", "not yours") if body["queue"] == "AUDIT" else allowed(body))
    device_qm.define_remote_queue("AUDIT", target_qmgr="HOME")
    device_qm.put("AUDIT", Message(b"audit"))
    device_qm.put("ORDERS", Message(b"order"))

    report = make_pusher().push_once()

    assert report.transmitted == 1 and report.error is not None and "not yours" in report.error
    assert (device_qm.depth("AUDIT"), device_qm.depth("ORDERS")) == (1, 0)


def test_transmit_pushes_at_once_or_raises(
    make_pusher: Callable[..., Pusher], fake_home: FakeHome, device_qm: QueueManager
) -> None:
    accept_all(fake_home)
    pusher = make_pusher()
    device_qm.define_remote_queue("ELSEWHERE", target_qmgr="OTHER")
    with pytest.raises(SyncError, match="targets OTHER"):
        pusher.transmit("ELSEWHERE")
    device_qm.put("ORDERS", Message(b"now"))
    pusher.transmit("ORDERS")
    assert device_qm.depth("ORDERS") == 0
    fake_home.handlers[p.PATH_PUT] = lambda body: {"type": "put", "results": results(body["messages"], "refused")}
    device_qm.put("ORDERS", Message(b"refused"))
    with pytest.raises(SyncError, match="did not take the message"):
        pusher.transmit("ORDERS")
    assert device_qm.depth("ORDERS") == 1
