"""What a broken or hostile home server can make a device keep for remote administration
(issue 29, defect 5): refusals of distinct garbage requests, remembered without bound for
31 days; an admin lease held up by a later process given its holder's PID."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeq import ManualClock, QueueManager
from edgeq.admin.executor import MAX_REFUSED
from edgeq.admin.store import REFUSED_PREFIX
from tests.adminkit import OPERATOR, admin_queues, enqueue, signed


@pytest.fixture
def dev(tmp_path: Path, clock: ManualClock) -> Iterator[QueueManager]:
    with QueueManager(tmp_path / "dev1.db", name="DEV1", clock=clock) as qm:
        qm.trust_admin_key("ops", OPERATOR.public_key())
        yield qm


def refusals(qm: QueueManager) -> list[str]:
    with qm._db.read() as conn:
        rows = conn.execute("SELECT request_id FROM admin_replies WHERE request_id LIKE ? "
                            "ORDER BY executed_ms", (REFUSED_PREFIX + "%",)).fetchall()
    return [str(row[0]) for row in rows]


def test_the_refusals_a_device_remembers_are_bounded(dev: QueueManager, clock: ManualClock) -> None:
    """Each distinct garbage request was remembered for 31 days: a server could grow a
    device's store without limit. The newest MAX_REFUSED are kept; a signed request's
    reply is never forgotten for them."""
    run = dev.execute_admin(signed(dev, "inquire-all").to_bytes())
    for n in range(MAX_REFUSED + 10):
        clock.advance(1)
        assert dev.execute_admin(f"garbage {n}".encode()).rc == "failed"
    kept = refusals(dev)
    assert len(kept) == MAX_REFUSED
    assert dev.execute_admin(f"garbage {MAX_REFUSED + 9}".encode()).rc == "failed"  # the newest: remembered
    assert refusals(dev) == kept
    assert [r.request_id for r in dev.admin_history(limit=MAX_REFUSED + 10)].count(run.request_id) == 1


def test_a_lease_whose_pid_now_belongs_to_another_process_is_taken_over(dev: QueueManager) -> None:
    """The lease judged its holder alive by PID alone: a later process given the same PID
    held admin up for the lease's 10 minutes. The holder's start time tells them apart."""
    admin_queues(dev)
    enqueue(dev, signed(dev, "inquire-all"))
    with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as stat:
        started = int(stat.read().rpartition(")")[2].split()[19])
    with dev._db.write() as conn:
        conn.execute("INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('admin.lease', ?)",
                     (json.dumps({"token": "other", "pid": os.getpid(), "started": started - 1,
                                  "until_ms": dev.now_ms() + 600_000}),))
    assert len(dev.process_admin()) == 1
    with dev._db.write() as conn:  # the same pid and start time: its holder, alive
        conn.execute("INSERT OR REPLACE INTO edgeq_meta (key, value) VALUES ('admin.lease', ?)",
                     (json.dumps({"token": "other", "pid": os.getpid(), "started": started,
                                  "until_ms": dev.now_ms() + 600_000}),))
    enqueue(dev, signed(dev, "inquire-all"))
    assert dev.process_admin() == []
