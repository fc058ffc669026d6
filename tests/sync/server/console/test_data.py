"""The fleet page's reads: each list a page, in the same number of queries for a small fleet or a large."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from edgeq import QueueManager
from edgeq.store.devices import DeviceTx
from edgeq.store.journal import JournalTx, entry_row
from edgeq.store.opening import connect
from edgeq.sync.server.console.data import console_view
from edgeq.sync.server.console.lists import LISTS, PAGE, Ask, read_asks

NOW = 10**13


def _store(path: Path, n: int) -> Path:
    """``n`` devices, queues, expiries and refusals."""
    with QueueManager(path, name="HOME") as qm:
        for i in range(n):
            qm.define_queue(f"Q{i:03}")
            qm.register_device(f"D{i:03}", i.to_bytes(32, "big"))
    with closing(connect(path)) as conn:
        JournalTx(conn).add([entry_row("expired", "server", NOW - i, f"Q{i:03}", f"D{i:03}:a.{i}",
                                       f"D{i:03}:a", check_point="get", device=f"D{i:03}") for i in range(n)])
        for i in range(n):
            DeviceTx(conn).refused(f"D{i:03}", f"Q{i:03}", {"not-allowed": (1, "no")}, NOW - i)
        conn.commit()
    return path


def _selects(path: Path, asks: dict[str, Ask]) -> tuple[int, dict[str, int]]:
    statements: list[str] = []
    with closing(connect(path, read_only=True)) as conn:
        conn.set_trace_callback(statements.append)
        view = console_view(conn, path, NOW, asks)
    rows = {"devices": len(view.devices), "queues": len(view.queues), "expiries": len(view.expiries),
            "refusals": len(view.refusals)}
    return sum(s.lstrip().upper().startswith("SELECT") for s in statements), rows


def test_every_list_is_a_page_read_in_the_same_queries_for_3_rows_or_45(tmp_path: Path) -> None:
    small, large = _store(tmp_path / "small.db", 3), _store(tmp_path / "large.db", PAGE * 2 + 5)
    first, rows = _selects(large, {})
    assert rows == dict.fromkeys(rows, PAGE)
    with closing(connect(large, read_only=True)) as conn:
        view = console_view(conn, large, NOW, {})
    assert all(view.next[name] for name in rows) and view.matching == {"devices": 45, "queues": 45}
    second, rows = _selects(large, read_asks({f"{name}-after": view.next[name] or "" for name in rows}
                                             | {"devices": "D0", "queues": "Q0"}))
    assert rows == {"devices": PAGE, "queues": PAGE, "expiries": PAGE, "refusals": PAGE}
    assert _selects(small, {})[0] == first == second
    assert set(LISTS) == {*rows, "bridges", "parked"}
