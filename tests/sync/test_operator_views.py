"""What the operator is shown of the fleet is what happened (issue 28, defect 3), against a
real home server on loopback: the console read over HTTP, `/metrics` scraped over HTTP,
`edgeq server ...` run as a subprocess. A device's last contact moves with every request
(written at most every 10 s), what the server refused is recorded per device, queue and
reason, and a queue's depth leaves out the expired messages no check point discarded yet."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlite_utils import Database

from edgeq import Int32, ManualClock, Message, QueueManager
from edgeq.store.integrity import register
from edgeq.store.opening import APPLICATION_ID
from edgeq.store.schema import MIGRATIONS
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.server.console.auth import set_password
from tests.sync.conftest import T0, LiveServer

PASSWORD = "operator-pass-1"
SEEN_WRITE_MS = 10_000


@pytest.fixture
def console(home_qm: QueueManager, make_console: Callable[..., LiveServer]) -> LiveServer:
    """The console over the store the device server (``server``) serves."""
    set_password(home_qm.path, PASSWORD)
    return make_console(home_qm)


def console_page(server: LiveServer) -> str:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.post("/console/login", data={"user": "operator", "password": PASSWORD}
                       ).status_code == 303
        page = client.get("/console")
    assert page.status_code == 200
    return page.text


def scrape(server: LiveServer) -> list[str]:
    answer = httpx.get(server.url + "/metrics", timeout=10)
    assert answer.status_code == 200
    return answer.text.splitlines()


def edgeq_json(db: Path, *args: str) -> Any:
    """`edgeq ARGS --db DB --json` in a subprocess, its output decoded."""
    done = subprocess.run([sys.executable, "-m", "edgeq", *args, "--db", str(db), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def last_seen(db: Path, device: str) -> int | None:
    (row,) = [d for d in edgeq_json(db, "server", "devices", "list") if d["name"] == device]
    return row["last_seen_ms"]  # type: ignore[no-any-return]


def fleet_cell(page: str, device: str, column: int) -> str:
    """The text of one cell of a device's row in the console's fleet table."""
    row = page.split(f'data-device="{device}">')[1].split("</tr>")[0]
    return re.sub(r"<[^>]+>", "", row.split("<td")[column + 1].split(">", 1)[1]).strip()


def tick(ms: int, *clocks: ManualClock) -> None:
    for clock in clocks:
        clock.advance(ms)


def test_every_request_counts_as_contact_written_at_most_every_ten_seconds(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent, server: LiveServer, console: LiveServer,
    server_clock: ManualClock, device_clock: ManualClock,
) -> None:
    device_qm.put("ORDERS", Message(b"1"))
    assert agent.push_once().transmitted == 1  # the hello, at T0
    assert last_seen(home_qm.path, "DEV1") == T0

    for minute in range(11):  # a device syncing every minute, with no new hello
        tick(60_000, server_clock, device_clock)
        device_qm.put("ORDERS", Message(b"%d" % minute))
        assert agent.push_once().transmitted == 1
    assert server.sessions.get("DEV1").hellos == 1
    synced = T0 + 11 * 60_000
    assert last_seen(home_qm.path, "DEV1") == synced
    assert fleet_cell(console_page(console), "DEV1", 1) == "0 s ago"

    tick(SEEN_WRITE_MS - 1, server_clock, device_clock)  # within the window: not written again
    device_qm.put("ORDERS", Message(b"late"))
    assert agent.push_once().transmitted == 1
    assert last_seen(home_qm.path, "DEV1") == synced
    gauge = (f'edgeq_sync_device_last_seen_timestamp_seconds{{device="DEV1"}} '
             f'{(synced + SEEN_WRITE_MS - 1) / 1000}')
    assert gauge in scrape(server)  # the process itself knows the request

    tick(1, server_clock, device_clock)
    device_qm.put("ORDERS", Message(b"later"))
    assert agent.push_once().transmitted == 1
    assert last_seen(home_qm.path, "DEV1") == synced + SEEN_WRITE_MS


def test_the_server_records_what_it_refused_per_device_queue_and_reason(
    device_qm: QueueManager, home_qm: QueueManager, agent: SyncAgent, server: LiveServer, console: LiveServer,
    server_clock: ManualClock, device_clock: ManualClock,
) -> None:
    home_qm.alter_queue("ORDERS", max_depth=1)
    device_qm.define_remote_queue("METRICS", target_qmgr="HOME")  # the server has no METRICS
    device_qm.put_many("METRICS", [Message(b"a"), Message(b"b")])
    device_qm.put_many("ORDERS", [Message(b"o1"), Message(b"o2")])  # the second finds ORDERS full
    first = agent.push_once()
    assert (first.transmitted, first.refused) == (1, 3)
    tick(60_000, server_clock, device_clock)
    again = agent.push_once()
    assert again.refused == 3

    listed = edgeq_json(home_qm.path, "server", "refusals", "list")
    by_key = {(r["device"], r["queue"], r["reason"]): r for r in listed}
    # not per message
    assert set(by_key) == {("DEV1", "METRICS", "no-queue"), ("DEV1", "ORDERS", "queue-full")}
    metrics, orders = by_key[("DEV1", "METRICS", "no-queue")], by_key[("DEV1", "ORDERS", "queue-full")]
    assert (metrics["count"], metrics["first_ms"], metrics["last_ms"]) == (4, T0, T0 + 60_000)
    assert "edgeq queue define METRICS" in metrics["last_detail"] and orders["count"] == 2
    assert "is full" in orders["last_detail"]

    lines = scrape(server)
    assert "edgeq_sync_messages_refused_total 6" in lines
    assert 'edgeq_sync_device_refusals_total{device="DEV1",queue="METRICS",reason="no-queue"} 4' in lines
    assert 'edgeq_sync_device_refusals_total{device="DEV1",queue="ORDERS",reason="queue-full"} 2' in lines

    page = console_page(console)
    assert fleet_cell(page, "DEV1", 5) == "6"
    refusals = page.split('id="refusals"')[1].split("</table>")[0]
    assert "None." not in refusals
    rows = re.findall(
        r"<tr class=\"refusal\"[^>]*><td>[^<]*</td><td>(\w+)</td><td>(\w+)</td><td class=\"n\">(\d+)</td>"
        r"<td>([^<]*)</td>", refusals)
    assert {(q, d, int(n)) for q, d, n, _ in rows} == {("METRICS", "DEV1", 4), ("ORDERS", "DEV1", 2)}


def test_the_console_shows_clock_offsets_from_the_store_not_from_a_device_session(
    device_qm: QueueManager, agent: SyncAgent, server: LiveServer, console: LiveServer,
    device_clock: ManualClock,
) -> None:
    """The console runs apart from the device server (its own process): the offset and its
    bounds (the hello's and the latest put's) are read from the store, not a session."""
    device_clock.advance(5_000)  # the device's clock 5 s ahead of the server's
    device_qm.put("ORDERS", Message(b"1"))
    assert agent.push_once().transmitted == 1
    page = console_page(console)
    assert (fleet_cell(page, "DEV1", 2), fleet_cell(page, "DEV1", 3)) == ("5000", "5000 … 5000")


def test_the_console_leaves_expired_messages_out_of_a_queues_depth(
    home_qm: QueueManager, console: LiveServer, server_clock: ManualClock
) -> None:
    home_qm.put_many("ORDERS", [Message(b"live"), Message(b"live")])
    home_qm.put_many("ORDERS", [Message(b"short", expiry=Int32(1_000)) for _ in range(3)])
    server_clock.advance(5_000)  # three expired, not yet discarded by any check point

    page = console_page(console)
    row = page.split('data-queue="ORDERS">')[1].split("</tr>")[0]
    depth = re.search(r'class="n depth">(\d+)<', row)
    assert depth is not None and depth.group(1) == "2"
    assert re.search(r'class="n expired">3<', row)  # said apart: held until a check point discards them
    assert home_qm.depth("ORDERS") == 2  # what the queue manager says



def test_a_store_from_before_the_refusals_table_gains_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    before = [step.__name__ for step in MIGRATIONS].index("_v12")  # the step that made device_refusals
    conn = sqlite3.connect(path, isolation_level=None)  # the store as the schema before it left it
    register(conn)
    for step in MIGRATIONS[:before]:
        step(Database(conn))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {before}")
    conn.execute("INSERT INTO edgeq_meta (key, value) VALUES ('name', 'HOME'), ('incarnation', 'abc')")
    conn.close()
    with QueueManager(path) as qm:
        qm.exchange.record_refusals(
            "DEV1", "METRICS", {"no-queue": (2, "no-queue: HOME has no queue METRICS")})
        (row,) = qm.exchange.device_refusals()
    assert (row.device, row.queue, row.reason, row.count) == ("DEV1", "METRICS", "no-queue", 2)
