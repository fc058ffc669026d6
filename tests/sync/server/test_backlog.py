"""edgeq.sync.server.backlog: the backlog figures on real stores with a controlled clock, the backlog a
device reports pushing to a real server over loopback, and the same figures in its /metrics."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from edgeq import ManualClock, Message, QueueManager
from edgeq.exchange.transmit import DEFAULT_REFUSAL_LIMIT
from edgeq.store.journal import JournalTx, entry_row
from edgeq.store.opening import connect
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.server.backlog import RATE_WINDOW_MS, queue_backlogs, read_backlog
from tests.sync.conftest import T0, LiveServer

DOCS = Path(__file__).parents[3] / "docs"


@pytest.fixture
def home(tmp_path: Path, server_clock: ManualClock) -> Iterator[QueueManager]:
    """A home server's store that keeps the server's journal (what ``edgeq serve`` opens)."""
    with QueueManager(tmp_path / "journaled.db", name="HOME", clock=server_clock, journal="server") as qm:
        qm.define_queue("ORDERS")
        yield qm


@pytest.fixture
def served(home: QueueManager, make_server: Callable[..., LiveServer]) -> LiveServer:
    return make_server(home)


def test_age_out_rate_and_drain_estimate_per_queue_with_a_controlled_clock(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with QueueManager(tmp_path / "home.db", name="HOME", clock=clock, journal="server") as qm:
        qm.define_queue("ORDERS", expiry_ms=3_600_000)
        qm.define_queue("EMPTY")
        qm.put_many("ORDERS", [Message(b"%d" % i) for i in range(10)])  # created at T0
        clock.advance(60_000)
        for _ in range(3):
            qm.get("ORDERS")  # journal "delivered" at T0 + 60 s
    now = T0 + 120_000

    empty, orders = read_backlog(tmp_path / "home.db", now_ms=now).queues

    assert (orders.name, orders.depth, orders.expired, orders.oldest_age_ms) == ("ORDERS", 7, 0, 120_000)
    assert orders.out_per_s == 3 / (RATE_WINDOW_MS / 1000)
    assert orders.drain_ms == 2_100_000  # 7 messages at 3 per 15 min: 35 min
    assert orders.expiry_ms == 3_600_000 and orders.bytes == 7
    assert (empty.depth, empty.oldest_age_ms, empty.out_per_s, empty.drain_ms, empty.expiry_ms) == (
        0, None, 0, None, None)
    # Once the gets are older than the window nothing went out lately: no estimate, never a made-up one.
    (later,) = [q for q in read_backlog(tmp_path / "home.db", now_ms=T0 + 60_000 + RATE_WINDOW_MS).queues
                if q.name == "ORDERS"]
    assert (later.depth, later.out_per_s, later.drain_ms) == (7, 0, None)


def test_expired_messages_are_apart_from_depth_and_age(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with QueueManager(tmp_path / "home.db", name="HOME", clock=clock) as qm:
        qm.define_queue("Q")
        qm.put("Q", Message(b"short").expire_after(1_000))
        clock.advance(5_000)
        qm.put("Q", Message(b"long"))
    (q,) = read_backlog(tmp_path / "home.db", now_ms=T0 + 10_000).queues
    assert (q.depth, q.expired, q.oldest_age_ms) == (1, 1, 5_000)  # the expired one is not the oldest


def test_dead_lettered_and_given_up_by_reason_and_devices_reported_backlogs(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "home.db", name="HOME", clock=ManualClock(T0), journal="server") as qm:
        qm.exchange.record_device("DEV1")
        qm.exchange.record_device("DEV2")
        qm.exchange.record_backlog("DEV1", "ORDERS", 40)
        qm.exchange.record_backlog("DEV1", "METRICS", 2)
        qm.exchange.record_backlog("DEV1", "ORDERS", 30)  # the latest report of a queue replaces the last
    with closing(connect(tmp_path / "home.db")) as conn:
        JournalTx(conn).add([
            *(entry_row("dead-lettered", "device", T0, "ORDERS", f"DEV1:a.{i}", "DEV1:a",
                        check_point="refused", device="DEV1") for i in range(3)),
            entry_row("dead-lettered", "server", T0, "OUT", "HOME:b.1", "HOME:b", check_point="refused"),
            *(entry_row("discarded", "server", T0, "SYSTEM.DEAD.LETTER.QUEUE", f"HOME:b.{i}", "HOME:b",
                        check_point="deleted") for i in range(2)),
        ])

    found = read_backlog(tmp_path / "home.db", now_ms=T0 + 1)

    assert found.dead_lettered == {"refused": 4} and found.given_up == {"deleted": 2}
    dev1, dev2 = found.devices
    assert (dev1.name, dev1.backlog, dev1.reported_ms, dev1.last_seen_ms) == ("DEV1", 32, T0, T0)
    assert (dev2.name, dev2.backlog, dev2.reported_ms) == ("DEV2", None, None)  # never reported: not 0


def test_the_figures_cost_the_same_queries_for_2_queues_or_40(tmp_path: Path) -> None:
    def selects(queues: int) -> int:
        path = tmp_path / f"q{queues}.db"
        with QueueManager(path, name="HOME", journal="server") as qm:
            for i in range(queues):
                qm.define_queue(f"Q{i}")
                qm.put(f"Q{i}", Message(b"x"))
                qm.get(f"Q{i}")
                qm.put(f"Q{i}", Message(b"y"))
        statements: list[str] = []
        with closing(connect(path, read_only=True)) as conn:
            conn.set_trace_callback(statements.append)
            assert len(queue_backlogs(conn, T0)) == queues
        return sum(s.lstrip().upper().startswith("SELECT") for s in statements)

    assert selects(2) == selects(40) == 3


def _metrics(http: httpx.Client, server: LiveServer) -> list[str]:
    response = http.get(server.url + "/metrics")
    assert response.status_code == 200
    return response.text.splitlines()


def test_a_device_reports_its_backlog_while_pushing_and_metrics_show_it(
    device_qm: QueueManager, home: QueueManager, served: LiveServer, make_agent: Callable[..., SyncAgent],
    server_clock: ManualClock, http: httpx.Client,
) -> None:
    home.define_queue("SMALL", max_depth=2, expiry_ms=600_000)
    device_qm.define_remote_queue("SMALL", target_qmgr="HOME")
    server = served
    agent = make_agent(device_qm, server.url, batch_size=2)
    device_qm.put_many("SMALL", [Message(b"%d" % i) for i in range(5)])
    # 10 s pass on the server once it has stored the first put (which reports 5): the confirm's
    # report is then due and stored; the next put's (the same 3) comes within 10 s of it.
    server.faults.rewrite_next("/v1/put", lambda body: (server_clock.advance(10_000), body)[1])

    report = agent.push_once()  # 2 moved; the next 2 refused (the server's queue is full)

    assert (report.transmitted, report.refused) == (2, 2)
    assert device_qm.depth("SMALL") == 3
    (dev1,) = read_backlog(home.path, now_ms=server_clock()).devices
    assert (dev1.backlog, dev1.reported_ms) == (3, T0 + 10_000)
    lines = _metrics(http, server)
    assert 'edgeq_device_backlog_messages{device="DEV1"} 3' in lines
    assert f'edgeq_device_backlog_reported_timestamp_seconds{{device="DEV1"}} {(T0 + 10_000) / 1000}' in lines
    assert 'edgeq_queue_depth_messages{queue="SMALL"} 2' in lines
    assert 'edgeq_queue_expiry_interval_seconds{queue="SMALL"} 600.0' in lines
    assert 'edgeq_queue_oldest_message_age_seconds{queue="SMALL"} 10.0' in lines
    assert not [line for line in lines if line.startswith("edgeq_queue_drain_estimate_seconds{")]  # no rate
    home.get("SMALL")  # one out: now there is a rate, and an estimate
    lines = _metrics(http, server)
    assert 'edgeq_queue_drain_estimate_seconds{queue="SMALL"} 900.0' in lines  # 1 left, 1 per 15 min

    home.alter_queue("SMALL", max_depth=None)
    agent.push_once()  # all of it moves: the last confirm reports 0, stored at once

    assert device_qm.depth("SMALL") == 0
    (dev1,) = read_backlog(home.path, now_ms=server_clock()).devices
    assert (dev1.backlog, dev1.reported_ms) == (0, T0 + 10_000)


def test_metrics_count_dead_lettered_by_reason_from_the_devices_reports(
    device_qm: QueueManager, served: LiveServer, make_agent: Callable[..., SyncAgent], http: httpx.Client,
) -> None:
    agent = make_agent(device_qm, served.url)
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")  # the server has no METRICS
    device_qm.put("METRICS", Message(b"lost"))
    for _ in range(DEFAULT_REFUSAL_LIMIT):
        agent.sync_once()
    agent.sync_once()  # the dead-lettering is reported with the device's expiries

    lines = _metrics(http, served)
    assert 'edgeq_dead_lettered_total{reason="refused"} 1' in lines
    assert "# TYPE edgeq_dead_lettered_total counter" in lines
    assert "# TYPE edgeq_given_up_total counter" in lines


def test_label_values_are_escaped(home_qm: QueueManager, server: LiveServer, http: httpx.Client) -> None:
    hostile = 'x"} 1\nedgeq_forged 1 \\'  # a reason is a device's text: it could be anything
    with closing(connect(home_qm.path)) as conn:
        JournalTx(conn).add([entry_row("discarded", "device", T0, "Q", "DEV1:a.1", "DEV1:a",
                                       check_point=hostile, device="DEV1")])
    lines = _metrics(http, server)
    assert 'edgeq_given_up_total{reason="x\\"} 1\\nedgeq_forged 1 \\\\"} 1' in lines
    assert not [line for line in lines if line.startswith("edgeq_forged")]


def test_the_documented_alert_uses_metrics_and_labels_the_server_exports(
    home_qm: QueueManager, server: LiveServer, http: httpx.Client,
) -> None:
    """The example rule in docs/protocol.md names only series /metrics has, with the labels it matches on."""
    text = (DOCS / "protocol.md").read_text(encoding="utf-8")
    rule = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    expr = re.search(r"expr: *(.+(?:\n {9,}.+)*)", rule)  # its lines: those indented past "expr"
    assert expr is not None and "alert: EdgeqOldestMessageOverHalfItsExpiry" in rule
    names = set(re.findall(r"\bedgeq_[a-z_]+", expr.group(1)))
    labels = set(re.findall(r"on *\(([a-z_, ]+)\)", expr.group(1)))
    home_qm.define_queue("EXPIRING", expiry_ms=60_000)
    home_qm.put("EXPIRING", Message(b"x"))

    exported = {line.split("{")[0]: line for line in _metrics(http, server) if line.startswith("edgeq_")}

    assert names == {"edgeq_queue_oldest_message_age_seconds", "edgeq_queue_expiry_interval_seconds"}
    assert labels == {"queue"}
    for name in names:
        assert name in exported and 'queue="EXPIRING"' in exported[name]
