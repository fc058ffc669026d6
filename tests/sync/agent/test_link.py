"""The agent's link to its home server, against the real one (uvicorn on loopback over a
real store): what every request carries, the hello (again when the server asks), what a
failure changes, and the bounds every answer teaches. Requests go through ``Network``,
which records them and makes the faults."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from edgeq import ManualClock, Message, MessageUID, QueueManager
from edgeq.sync import protocol as p
from edgeq.sync.agent.link import ServerLink, decode_results
from edgeq.sync.agent.transport import ServerRefused, Unreachable
from tests.sync.conftest import T0, LiveServer, Network


def test_every_request_says_which_store_calls_and_what_it_settled(
    make_link: Callable[..., ServerLink], network: Network, server: LiveServer, device_qm: QueueManager
) -> None:
    link = make_link()
    link.hello()
    (hello,) = network.bodies(p.PATH_HELLO)  # the hello says it too
    assert (hello["origin"], hello["settled"]) == (device_qm.origin, device_qm.exchange.settled_below())
    uid = device_qm.put("ORDERS", Message(b"x"))
    device_qm.exchange.transmitted("ORDERS", [uid])  # the mark moves past it
    assert server.sessions.settle_due(device_qm.origin, device_qm.exchange.settled_below())  # not applied yet
    answer = link.call(p.PATH_PULL, {"type": "pull", "now_ms": T0, "queue": "INBOX", "max": 5}, "pull")
    assert answer["type"] == "pull" and answer["missing"]  # the server holds no DEV1.INBOX
    (body,) = network.bodies(p.PATH_PULL)
    assert ((body["qmgr"], body["origin"], body["settled"])
            == ("DEV1", device_qm.origin, device_qm.exchange.settled_below()))
    assert (body["queue"], body["max"]) == ("INBOX", 5)
    assert not server.sessions.settle_due(device_qm.origin, body["settled"])  # the server applied the mark


def test_the_hello_learns_the_servers_limits_and_starts_the_clock_bounds(
    make_link: Callable[..., ServerLink], network: Network, home_qm: QueueManager,
    make_server: Callable[..., LiveServer],
) -> None:
    server = make_server(home_qm, max_batch=7)
    link = make_link(to=server)
    assert not link.online and link.server_clock.empty
    info = link.hello()
    assert (info.server, info.max_batch, info.offset_ms) == ("HOME", 7, 0)
    assert link.online and link.info is info and link.ensure_hello() is info  # no second hello
    assert not link.server_clock.empty and link.server_clock.lower(0.0) == T0
    assert network.calls == [p.PATH_HELLO]
    state = server.sessions.current("DEV1")
    assert state is not None and state.hellos == 1 and state.agent.startswith("edgeq/")


def test_a_hello_required_answer_is_met_with_a_hello_and_one_retry(
    make_link: Callable[..., ServerLink], network: Network, server: LiveServer,
    caplog: pytest.LogCaptureFixture
) -> None:
    link = make_link()
    link.hello()
    server.sessions.clear()  # what a restart of the server forgets: it answers hello-required
    with caplog.at_level(logging.INFO, logger="edgeq.sync.agent"):
        answer = link.call(p.PATH_CONFIRM, {"type": "confirm", "now_ms": T0, "queue": "ORDERS", "uids": []},
                           "confirm")
    assert answer["type"] == "confirm"
    assert network.calls == [p.PATH_HELLO, p.PATH_CONFIRM, p.PATH_HELLO, p.PATH_CONFIRM]
    assert "rehello" in [getattr(r, "event", None) for r in caplog.records]
    assert server.sessions.current("DEV1") is not None and link.online


def test_a_failed_request_marks_the_server_offline_and_a_hello_due_a_refused_one_only_the_hello(
    make_link: Callable[..., ServerLink], network: Network
) -> None:
    link = make_link()
    link.hello()
    network.down_for.add(p.PATH_PUT)
    with pytest.raises(Unreachable):
        link.call(p.PATH_PUT, {"type": "put", "now_ms": T0, "queue": "ORDERS", "messages": []}, "put")
    assert not link.online
    link.ensure_hello()
    assert link.online and network.calls.count(p.PATH_HELLO) == 2
    with pytest.raises(ServerRefused) as refused:  # a refusal: the next exchange says hello first
        link.call(p.PATH_CONFIRM, {"type": "confirm", "now_ms": T0, "queue": "ORDERS"}, "confirm")  # no uids
    # ... but the server answered: it is reachable, and a put still wakes the daemon (a refused
    # request is one queue's failure, which must not hold up the others)
    assert (refused.value.code, refused.value.status) == ("invalid", 422) and link.online
    link.ensure_hello()
    assert link.online and network.calls.count(p.PATH_HELLO) == 3


def test_a_failed_hello_marks_the_server_offline(
    make_link: Callable[..., ServerLink], network: Network
) -> None:
    link = make_link()
    link.hello()
    assert link.online
    network.down_for.add(p.PATH_HELLO)  # a push after a quiet spell starts with a hello: the server is gone
    with pytest.raises(Unreachable):
        link.hello()
    assert not link.online  # so a put no longer wakes the daemon for a cycle that cannot work


def test_a_bad_hello_answer_is_unreachable(
    make_link: Callable[..., ServerLink], home_qm: QueueManager, make_server: Callable[..., LiveServer]
) -> None:
    link = make_link(to=make_server(home_qm, max_body_bytes=512))  # a limit no agent can work under
    with pytest.raises(Unreachable, match=r"bad hello answer .*'max_body_bytes'"):
        link.hello()
    assert not link.online and link.server_clock.empty


def test_an_answer_outside_the_clock_bounds_restarts_them(
    make_link: Callable[..., ServerLink], network: Network, server: LiveServer, server_clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    link = make_link()
    link.hello()
    epoch = link.server_clock.epoch
    network.before[p.PATH_PULL] = lambda: server_clock.advance(3_600_000)  # the server's clock steps an hour
    with caplog.at_level(logging.WARNING, logger="edgeq.sync.agent"):
        link.call(p.PATH_PULL, {"type": "pull", "now_ms": T0, "queue": "INBOX", "max": 5}, "pull")
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
