"""The agent's link to its home server: what every request carries, the hello (again
when the server asks), what a failure changes, and the bounds every answer teaches."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from edgeq.sync import protocol as p
from edgeq.sync.link import ServerLink, decode_results
from edgeq.sync.transport import ServerRefused, Unreachable

from edgeq import ManualClock, Message, MessageUID, QueueManager

from .conftest import T0
from .fakehome import FakeHome, refusal


def test_every_request_says_which_store_calls_and_what_it_settled(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, device_qm: QueueManager
) -> None:
    fake_home.handlers[p.PATH_PULL] = lambda body: {"type": "pull", "messages": []}
    link = make_link()
    answer = link.call(p.PATH_PULL, {"type": "pull", "queue": "INBOX", "max": 5}, "pull")
    assert answer["type"] == "pull"
    (body,) = fake_home.bodies(p.PATH_PULL)
    assert (body["qmgr"], body["origin"], body["settled"]) == ("DEV1", device_qm.origin, device_qm.settled_below())
    assert (body["queue"], body["max"]) == ("INBOX", 5)


def test_the_hello_learns_the_servers_limits_and_starts_the_clock_bounds(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, device_clock: ManualClock
) -> None:
    fake_home.max_batch = 7
    link = make_link()
    assert not link.online and link.server_clock.empty
    info = link.hello()
    assert (info.server, info.max_batch, info.offset_ms) == ("HOME", 7, 0)
    assert link.online and link.info is info and link.ensure_hello() is info  # no second hello
    assert not link.server_clock.empty and link.server_clock.lower(0.0) == T0
    assert fake_home.paths() == [p.PATH_HELLO]


def test_a_hello_required_answer_is_met_with_a_hello_and_one_retry(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, caplog: pytest.LogCaptureFixture
) -> None:
    answers = [refusal(428, "hello-required"), {"type": "confirm", "results": []}]
    fake_home.handlers[p.PATH_CONFIRM] = lambda body: answers.pop(0)
    link = make_link()
    link.hello()
    with caplog.at_level(logging.INFO, logger="edgeq.sync.agent"):
        assert link.call(p.PATH_CONFIRM, {"type": "confirm"}, "confirm")["type"] == "confirm"
    assert fake_home.paths() == [p.PATH_HELLO, p.PATH_CONFIRM, p.PATH_HELLO, p.PATH_CONFIRM]
    assert "rehello" in [getattr(r, "event", None) for r in caplog.records]


def test_a_failed_request_marks_the_server_offline_and_a_hello_due(
    make_link: Callable[..., ServerLink], fake_home: FakeHome
) -> None:
    fake_home.handlers[p.PATH_PUT] = lambda body: refusal(503, "busy")
    fake_home.handlers[p.PATH_CONFIRM] = lambda body: refusal(403, "forbidden")
    link = make_link()
    link.hello()
    with pytest.raises(Unreachable):
        link.call(p.PATH_PUT, {"type": "put"}, "put")
    assert not link.online
    link.ensure_hello()
    assert link.online and fake_home.paths().count(p.PATH_HELLO) == 2
    with pytest.raises(ServerRefused) as refused:  # a refusal too: the next exchange says hello first
        link.call(p.PATH_CONFIRM, {"type": "confirm"}, "confirm")
    assert refused.value.code == "forbidden" and not link.online


def test_a_bad_hello_answer_is_unreachable(make_link: Callable[..., ServerLink], fake_home: FakeHome,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_home, "_hello", lambda body: {"type": "hello", "server": "HOME"})
    link = make_link()
    with pytest.raises(Unreachable, match="bad hello answer"):
        link.hello()
    assert not link.online


def test_an_answer_outside_the_clock_bounds_restarts_them(
    make_link: Callable[..., ServerLink], fake_home: FakeHome, server_clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def stepped(body: object) -> dict[str, object]:
        server_clock.advance(3_600_000)  # the server's clock steps an hour forward mid-request
        return {"type": "pull", "messages": []}

    fake_home.handlers[p.PATH_PULL] = stepped
    link = make_link()
    link.hello()
    epoch = link.server_clock.epoch
    with caplog.at_level(logging.WARNING, logger="edgeq.sync.agent"):
        link.call(p.PATH_PULL, {"type": "pull"}, "pull")
    assert link.server_clock.epoch != epoch and link.server_clock.lower(0.0) == T0 + 3_600_000
    assert [getattr(r, "event", None) for r in caplog.records] == ["clock-reset"]


def test_results_are_checked_against_what_was_sent() -> None:
    sent = [Message(b"a", uid=MessageUID("DEV1", 1)), Message(b"b", uid=MessageUID("DEV1", 2))]
    body = {"results": [{"u": "DEV1.1", "s": "stored"}, {"u": "DEV1.2", "s": "refused", "why": "full"}]}
    assert decode_results(body, ("stored", "refused"), sent) == [("DEV1.1", "stored", None),
                                                                ("DEV1.2", "refused", "full")]
    with pytest.raises(Unreachable, match="does not match"):
        decode_results(body, ("stored", "refused"), sent[::-1])
    with pytest.raises(Unreachable, match="bad answer"):
        decode_results(body, ("stored",))
