"""More than one home server (docs/scaling.md): two servers, each its own store, each with
its own group of devices; both journals exported, and the per-server figures add up to
the fleet's. (``edgeq pipeline run --journal`` reads one export directory, so the check
here reads both exports' Parquet with pyarrow; see docs/scaling.md.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
from edgeq.sync.agent import SyncAgent
from edgeq.sync.pipeline.export import export_journal

from edgeq import ManualClock, Message, QueueManager

from .conftest import LiveServer

#: each server's device group, and what each device pushes
GROUPS = {"HOMEA": {"A1": 120, "A2": 80}, "HOMEB": {"B1": 50, "B2": 70, "B3": 30}}


def _journal(export: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for part in sorted(export.glob("date=*/*.parquet")):
        rows += pq.read_table(part).to_pylist()
    return rows


def test_two_servers_two_groups_their_exported_journals_add_up(
        tmp_path: Path, make_server: Callable[..., LiveServer], make_agent: Callable[..., SyncAgent],
        device_clock: ManualClock, server_clock: ManualClock) -> None:
    sent: dict[str, set[str]] = {}
    homes: dict[str, QueueManager] = {}
    for server_name, devices in GROUPS.items():
        home = homes[server_name] = QueueManager(tmp_path / f"{server_name}.db", name=server_name,
                                                 clock=server_clock, journal="server")
        home.define_queue("TELEMETRY")
        server = make_server(home)
        for device, n in devices.items():  # each device is assigned to one home server
            with QueueManager(tmp_path / f"{device}.db", name=device, clock=device_clock) as qm:
                qm.define_remote_queue("TELEMETRY", target_qmgr=server_name)
                uids = qm.put_many("TELEMETRY", [Message(b'{"t": %d}' % i) for i in range(n)])
                sent[device] = {str(u) for u in uids}
                report = make_agent(qm, server.url).push_once()
                assert report.ok and report.transmitted == n, report
    for home in homes.values():
        home.close()

    per_server: dict[str, list[dict[str, object]]] = {}
    for server_name in GROUPS:
        out = tmp_path / "journals" / server_name  # each server exports its own journal
        export_journal(tmp_path / f"{server_name}.db", out)
        per_server[server_name] = [r for r in _journal(out) if r["kind"] == "accepted"]

    for server_name, devices in GROUPS.items():
        rows = per_server[server_name]
        assert {r["device"] for r in rows} == set(devices)  # a server journals only its own group
        for device, n in devices.items():
            assert sum(r["device"] == device for r in rows) == n
        assert len(rows) == sum(devices.values())
    every = [str(r["uid"]) for rows in per_server.values() for r in rows]
    assert len(every) == len(set(every)) == sum(n for d in GROUPS.values() for n in d.values())  # 0 duplicated
    assert set(every) == set().union(*sent.values())  # 0 lost, across both servers
