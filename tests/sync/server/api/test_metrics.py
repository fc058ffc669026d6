"""``GET /api/v1/metrics``: the journal's counts per kind over time, over HTTP from the console's app and the
API's routes served as ``edgeq serve --console`` serves them, on a clock the test sets; journal rows at the
edges of each range's buckets; the same buckets as the console's queue chart."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from edgeq import ManualClock, QueueManager
from edgeq.store.journal import JournalKind, JournalTx, entry_row
from edgeq.store.opening import connect
from edgeq.sync.server.api.routes import api_routes
from edgeq.sync.server.api.tokens import create_token
from edgeq.sync.server.console.detail import CHARTED, read_queue
from edgeq.sync.server.console.routes import console_app
from tests.sync.conftest import LiveServer

T = 1_764_000_000_000  # a whole 2 hours (so a whole minute and quarter hour)
NOW = T + 90_500  # the server's clock: 1 min 30.5 s past T
#: each range's last bucket's end (the bucket holding NOW), its bucket's width and how many
EDGES = {"1h": (T + 120_000, 60_000, 60), "24h": (T + 900_000, 900_000, 96),
         "7d": (T + 7_200_000, 7_200_000, 84)}
SPANS = {"1h": 3_600_000, "24h": 86_400_000, "7d": 604_800_000}
KINDS = ("accepted", "expired", "delivered", "dead-lettered", "discarded")


@dataclass
class Served:
    url: str
    db: Path
    token: str

    def get(self, **query: str) -> httpx.Response:
        with httpx.Client(base_url=self.url, timeout=10) as http:
            bearer = {"Authorization": f"Bearer {self.token}"}
            return http.get("/api/v1/metrics", params=query, headers=bearer)


def _edges(span: str) -> list[tuple[JournalKind, int]]:
    """A row just before the range, at its start, at the first bucket's last ms, at the second's start,
    at the last bucket's last ms, and at its end (after it)."""
    end, step, _ = EDGES[span]
    start = end - SPANS[span]
    return [("accepted", start - 1), ("accepted", start), ("delivered", start + step - 1),
            ("expired", start + step), ("dead-lettered", end - 1), ("discarded", end)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("metrics") / "home.db"
    clock = ManualClock(NOW)
    rows = [entry_row(kind, "server", at, f"Q{span.upper()}", f"DEV1:a1.{span}{i}", "DEV1:a1")
            for span in EDGES for i, (kind, at) in enumerate(_edges(span))]
    rows += [entry_row("accepted", "server", NOW, "PUSHED", f"DEV1:a1.p{i}", "DEV1:a1", device="DEV1")
             for i in range(3)]
    rows += [entry_row("expired", "device", NOW - 60_000, "PUSHED", "DEV1:a1.x", "DEV1:a1", device="DEV1"),
             entry_row("accepted", "server", NOW, "PUSHED", "DEV2:b2.1", "DEV2:b2", device="DEV2"),
             entry_row("delivered", "server", NOW, "GONE", "HOME:c3.1", "HOME:c3")]
    with QueueManager(db, name="HOME", clock=clock) as qm:
        for span in EDGES:
            qm.define_queue(f"Q{span.upper()}")
        qm.define_queue("PUSHED")
        with closing(connect(db)) as conn:
            JournalTx(conn).add(rows)
        _, token = create_token(db, "dash", "viewer", now_ms=NOW)
        app = console_app(qm, clock=clock, api=api_routes(qm, clock=clock))
        server = LiveServer(qm, clock, app=app).start()
        try:
            yield Served(server.url, db, token)
        finally:
            server.stop()


@pytest.mark.parametrize("span", list(EDGES))
def test_a_queue_s_counts_fall_in_buckets_at_round_times_edges_included(served: Served, span: str) -> None:
    end, step, count = EDGES[span]
    got = served.get(range=span, queue=f"Q{span.upper()}")
    assert got.status_code == 200, got.text
    body = got.json()
    assert {k: body[k] for k in ("range", "queue", "device", "start_ms", "step_ms", "count", "end_ms")} == {
        "range": span, "queue": f"Q{span.upper()}", "device": None, "start_ms": end - SPANS[span],
        "step_ms": step, "count": count, "end_ms": end}
    expected = {kind: [0] * count for kind in KINDS}
    expected["accepted"][0] = expected["delivered"][0] = 1  # the row before the range is left out
    expected["expired"][1] = expected["dead-lettered"][count - 1] = 1  # the row at the end too
    assert body["series"] == expected


def test_the_console_s_queue_chart_draws_the_same_buckets(served: Served) -> None:
    for span in EDGES:
        body = served.get(range=span, queue=f"Q{span.upper()}").json()
        page = read_queue(served.db, f"Q{span.upper()}", now_ms=NOW, span=span, after=None)
        assert page is not None and page.start_ms == body["start_ms"]
        assert page.series == {label: body["series"][kind] for label, kind in CHARTED.items()}


def test_a_device_s_counts_and_the_whole_server_s(served: Served) -> None:
    dev1 = served.get(device="DEV1").json()  # the range is 1h when none is given
    assert dev1["range"] == "1h" and dev1["device"] == "DEV1"
    assert {kind: sum(n) for kind, n in dev1["series"].items()} == {
        "accepted": 3, "expired": 1, "delivered": 0, "dead-lettered": 0, "discarded": 0}
    assert dev1["series"]["accepted"][-1] == 3 and dev1["series"]["expired"][-2] == 1
    both = served.get(queue="PUSHED", device="DEV2").json()
    assert sum(both["series"]["accepted"]) == 1
    every = served.get(range="24h").json()  # Q1H's six rows, Q24H's four in range, PUSHED's, GONE's
    assert {kind: sum(n) for kind, n in every["series"].items()} == {
        "accepted": 2 + 1 + 4, "expired": 1 + 1 + 1, "delivered": 1 + 1 + 1, "dead-lettered": 1 + 1,
        "discarded": 1}
    gone = served.get(queue="GONE").json()  # deleted, or never defined here: its journal still counts
    assert sum(gone["series"]["delivered"]) == 1


@pytest.mark.parametrize(("query", "status", "says"), [
    ({"range": "1y"}, 400, "range must be one of 1h, 24h, 7d, not '1y'"),
    ({"range": ""}, 400, "range must be one of"),
    ({"queue": "no good"}, 400, "queue name"),
    ({"device": "<b>"}, 400, "device name"),
    ({"queue": "NOSUCH"}, 404, "no queue 'NOSUCH'"),
    ({"device": "NOSUCH"}, 404, "no device 'NOSUCH' is known here"),
])
def test_a_bad_range_queue_or_device_says_what_was_wrong(served: Served, query: dict[str, str], status: int,
                                                         says: str) -> None:
    got = served.get(**query)
    assert got.status_code == status and says in got.json()["error"], got.text


def test_metrics_need_a_credential(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=10) as http:
        assert http.get("/api/v1/metrics").status_code == 401
