"""Fault tests with real processes: `edgeq serve` and `edgeq sync --once` on loopback,
a fault proxy between them (``faultkit``). The device is SIGKILLed at each crash point
of the exchange and restarted, the server is SIGKILLed and restarted between and
during the stages, requests and answers are lost or duplicated; after recovery
every message is on the server exactly once, none is left on the device, and
none was delivered after its deadline (``Rig.verify``)."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.types import MessageState
from tests.sync.faultkit import QUEUE, Fault, Rig, locked_confirm_ids, now_ms

RigFactory = Callable[..., Rig]


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[RigFactory]:
    rigs: list[Rig] = []

    def _make(batch_size: int = 50, signed: bool = False) -> Rig:
        rig = Rig(tmp_path, batch_size=batch_size, signed=signed).start()
        rigs.append(rig)
        return rig

    yield _make
    for rig in rigs:
        rig.close()


def server_state(rig: Rig) -> tuple[int, int]:
    """(locked, visible) messages on the server's queue, read from its file while it runs."""
    conn = sqlite3.connect(rig.home_db, timeout=30)
    try:
        rows = conn.execute("SELECT state, count(*) FROM messages GROUP BY state").fetchall()
    finally:
        conn.close()
    counts = dict(rows)
    return counts.get(MessageState.PUT_LOCKED, 0), counts.get(0, 0)


def device_depth(rig: Rig) -> int:
    with QueueManager(rig.device_db) as qm:
        return qm.depth(QUEUE)


def test_a_clean_exchange_through_the_proxy(make_rig: RigFactory) -> None:
    rig = make_rig(batch_size=40)
    rig.put(100, tag="a", rng=random.Random(1))
    outcome = rig.run()
    assert outcome.code == 0 and outcome.pushed["transmitted"] == 100, outcome
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 100


# (action, path, nth): where the device dies, and what the server and device hold then
# (locked on the server, visible on the server, left on the device), None: either way
# (the agent pipelines batch 2's put with batch 1's confirm).
CRASH_POINTS = {
    "before-put": (Fault("kill-device-before", "/v1/put"), (0, 0, 150)),
    "after-put": (Fault("kill-device-after-forward", "/v1/put"), (50, 0, 150)),
    "confirm-never-sent": (Fault("kill-device-before", "/v1/confirm"), (None, 0, 150)),
    "after-confirm-sent": (Fault("kill-device-after-forward", "/v1/confirm"), (None, 50, 150)),
    "after-confirm-answered": (Fault("kill-device-after-answer", "/v1/confirm"), (None, None, None)),
    "after-second-put-answered": (Fault("kill-device-after-answer", "/v1/put", nth=2), (None, None, None)),
    "before-expiry-report": (Fault("kill-device-before", "/v1/expiries"), (0, 150, 0)),
}


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_device_killed_at_a_crash_point_then_restarted(make_rig: RigFactory, point: str) -> None:
    template, (locked, visible, left) = CRASH_POINTS[point]
    fault = Fault(template.action, template.path, template.nth)
    rig = make_rig(batch_size=50)
    rig.put(150, tag="c", rng=random.Random(2))
    rig.put(5, tag="gone", rng=random.Random(3), expiring=1.0, expiry_ms=(-5000, -1000))  # expired at put

    outcome = rig.run(fault)

    assert fault.fired and outcome.killed, outcome
    held = server_state(rig)
    assert locked is None or held[0] == locked, f"{point}: {held}"
    assert visible is None or held[1] == visible, f"{point}: {held}"
    assert left is None or device_depth(rig) == left
    if point == "after-confirm-answered":
        assert held[1] >= 50 and device_depth(rig) in (100, 150), held  # killed before or after its delete
    counts = rig.verify()  # restarted: it puts again with resend, and confirms
    assert counts["accepted"] == counts["delivered"] == 150 and counts["expired_device"] == 5


@pytest.mark.parametrize("action", ["drop-request", "drop-response"])
def test_a_lost_request_or_answer_is_retried_to_exactly_once(make_rig: RigFactory, action: str) -> None:
    """One round per endpoint, each with fresh messages: the run fails, the next retries."""
    rig = make_rig(batch_size=50)
    rng = random.Random(4)
    for path in ("/v1/hello", "/v1/put", "/v1/confirm", "/v1/expiries"):
        rig.put(120, tag=path[4:], rng=rng)
        rig.put(3, tag="gone", rng=rng, expiring=1.0, expiry_ms=(-5000, -1000))  # to report
        fault = Fault(action, path)
        outcome = rig.run(fault)
        assert fault.fired and outcome.code == 1 and outcome.pushed["error"], f"{path}: {outcome}"
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 480 and counts["expired_device"] == 12


@pytest.mark.parametrize(("action", "answer"), [("duplicate", "first"), ("duplicate", "second"),
                                                ("replay", "first")])
def test_duplicated_requests_change_nothing(make_rig: RigFactory, action: str, answer: str) -> None:
    """A request forwarded twice (the device gets the first or the second answer), or
    replayed after the exchange ended, on each endpoint: nothing is stored twice."""
    rig = make_rig(batch_size=50)
    rng = random.Random(6)
    for path in ("/v1/hello", "/v1/put", "/v1/confirm", "/v1/expiries"):
        rig.put(120, tag=path[4:], rng=rng)
        rig.put(3, tag="gone", rng=rng, expiring=1.0, expiry_ms=(-5000, -1000))
        fault = Fault(action, path, nth=2 if path in ("/v1/put", "/v1/confirm") else 1, answer=answer)
        outcome = rig.run(fault)
        assert (fault.fired and outcome.code == 0
                and outcome.pushed["transmitted"] == 120), f"{path}: {outcome}"
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 480 and counts["expired_device"] == 12


def test_server_killed_between_the_stages_keeps_its_locked_copies(make_rig: RigFactory) -> None:
    """Full durability: the locked copies of stage one survive a SIGKILL of the
    server; the restarted server asks for a new hello and the confirm goes through."""
    rig = make_rig(batch_size=100)  # one batch: the put's answer came back, the confirm is next
    rig.put(80, tag="s", rng=random.Random(8))
    seen: list[tuple[int, int]] = []

    def crash_between_stages() -> None:
        rig.server.kill()
        seen.append(server_state(rig))
        rig.server.start()

    fault = Fault("hook", "/v1/confirm", hook=crash_between_stages)
    outcome = rig.run(fault)

    assert fault.fired and seen == [(80, 0)], seen  # on disk after the crash: 80 locked, none visible
    assert outcome.code == 0, outcome
    assert ((outcome.pushed["transmitted"], outcome.pushed["requeued"], outcome.pushed["duplicates"])
            == (80, 0, 0))
    assert rig.server.starts == 2 and len(rig.server.events("hello")) == 2  # the new server asked again
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 80


@pytest.mark.parametrize("path", ["/v1/put", "/v1/confirm"])
def test_server_killed_while_it_handles_a_stage(make_rig: RigFactory, path: str) -> None:
    rig = make_rig(batch_size=50)
    rig.put(120, tag="k", rng=random.Random(9))
    fault = Fault("kill-server-during", path, nth=2)

    outcome = rig.run(fault)

    assert fault.fired and outcome.code == 1 and not rig.server.running, outcome
    counts = rig.verify()  # the next run restarts the server first
    assert counts["accepted"] == counts["delivered"] == 120


@pytest.mark.parametrize("path", ["/v1/put", "/v1/confirm"])
def test_server_killed_and_restarted_before_a_stage(make_rig: RigFactory, path: str) -> None:
    rig = make_rig(batch_size=50)
    rig.put(120, tag="r", rng=random.Random(10))
    fault = Fault("kill-server-before", path, nth=2)

    outcome = rig.run(fault)

    # A request of the other stage may meet the server while it restarts (502): the run fails then.
    assert fault.fired and outcome.code in (0, 1) and rig.server.starts == 2, outcome
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 120


def test_a_confirm_the_server_cannot_match_makes_the_device_put_again(make_rig: RigFactory) -> None:
    """The server loses its locked copies between the stages (here: undone while it
    is stopped): the confirm answers ``unknown``, the device keeps the messages and
    the next run puts them again; each arrives once."""
    rig = make_rig(batch_size=100)
    rig.put(60, tag="x", rng=random.Random(11))
    undone: list[int] = []

    def lose_locked_copies() -> None:
        rig.server.kill()
        with QueueManager(rig.home_db) as qm:
            undone.extend(qm.undo(QUEUE, cid) for cid in locked_confirm_ids(rig.home_db))
        rig.server.start()

    fault = Fault("hook", "/v1/confirm", hook=lose_locked_copies)
    outcome = rig.run(fault)

    assert fault.fired and sum(undone) == 60, undone
    assert (outcome.code == 0
            and (outcome.pushed["requeued"], outcome.pushed["transmitted"]) == (60, 0)), outcome
    assert device_depth(rig) == 60 and server_state(rig) == (0, 0)
    again = rig.run()
    assert again.code == 0 and again.pushed["transmitted"] == 60, again
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 60


def test_messages_that_expire_between_the_stages_are_never_delivered(make_rig: RigFactory) -> None:
    """The confirm is held up in the network past the deadline of half the batch:
    the server discards those (``expired``), the device's copies expire there too,
    and only the others are delivered."""
    rig = make_rig(batch_size=100)
    rng = random.Random(12)
    lasting = set(rig.put(20, tag="keep", rng=rng))
    short = set(rig.put(20, tag="short", rng=rng, expiring=1.0, expiry_ms=(4000, 4000)))
    # Taken after the puts, so no short message expires later than this (on a loaded
    # machine the puts themselves may take a second: a deadline taken before them
    # would release the confirm while the last ones are still alive).
    deadline = now_ms() + 4000
    at_confirm: list[tuple[int, int]] = []

    def hold_until_expired() -> None:
        at_confirm.append(server_state(rig))
        # The network holds the confirm (this delay is the fault, not synchronisation)
        # until the short deadline, plus more than the hello's latency, has passed.
        time.sleep(max(0, deadline + 300 - now_ms()) / 1000)

    fault = Fault("hook", "/v1/confirm", hook=hold_until_expired)
    outcome = rig.run(fault)

    assert fault.fired and outcome.code == 0, outcome
    assert at_confirm == [(40, 0)], (
        f"the put should arrive within 4 s, long before the deadline: {at_confirm}")
    assert (outcome.pushed["expired"], outcome.pushed["transmitted"]) == (20, 20), outcome
    with QueueManager(rig.home_db) as qm:
        expired_there = {e.uid for e in qm.journal_since(0) if e.kind == "expired" and e.side == "server"}
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 20
    assert short <= expired_there and counts["expired_device"] == 20  # "a message may seem to expire twice"
    assert lasting.isdisjoint(expired_there)


def test_a_signed_request_sent_twice_is_refused_as_a_replay(make_rig: RigFactory) -> None:
    """With signed requests, the second copy of a duplicated put is refused (401, replayed
    nonce) before anything is stored: if that is the answer the device gets, the run
    fails and the next one puts again; a confirm replayed later is refused too."""
    rig = make_rig(batch_size=50, signed=True)
    rig.put(120, tag="sig", rng=random.Random(13))
    fault = Fault("duplicate", "/v1/put", nth=2, answer="second")

    outcome = rig.run(fault)

    assert fault.fired and outcome.code == 1 and "401" in outcome.pushed["error"], outcome
    assert any("replay" in str(e.get("detail", "")).lower() for e in rig.server.events("auth-refused")), \
        rig.server.tail()
    late = Fault("replay", "/v1/confirm")
    assert rig.run(late).code == 0 and late.fired
    assert rig.proxy is not None and rig.proxy.replayed == [401]
    counts = rig.verify()
    assert counts["accepted"] == counts["delivered"] == 120
