"""edgeq.sync.server.nonces: the replay memory shared by every worker of a home server."""

from __future__ import annotations

import threading
from pathlib import Path

from edgeq.sync.server.nonces import SqliteNonces
from tests.store.test_commits import TIMEOUT, SlowDisk, until


def test_two_workers_racing_on_one_nonce_accept_it_once(tmp_path: Path) -> None:
    # Two server processes (workers) share the nonce file. Worker B reads that the nonce is
    # unknown; worker A remembers it before B writes: B must then refuse it (a replay
    # landing on both workers at the same instant is served once, not twice).
    a, b = SqliteNonces(tmp_path / "nonces.db"), SqliteNonces(tmp_path / "nonces.db")
    answers: list[bool] = []

    def between_read_and_write(sql: str) -> None:
        if sql.lstrip().upper().startswith("INSERT") and not answers:
            answers.append(a.add("DEV1", "n-1", 10_000, 1_000))

    b._conn.set_trace_callback(between_read_and_write)
    try:
        answers.append(b.add("DEV1", "n-1", 10_000, 1_000))
    finally:
        b._conn.set_trace_callback(None)
        a.close()
        b.close()
    assert answers == [True, False]


def test_an_expired_nonce_may_be_used_again(tmp_path: Path) -> None:
    nonces = SqliteNonces(tmp_path / "nonces.db")
    try:
        assert nonces.add("DEV1", "n-1", 2_000, 1_000) is True
        assert nonces.add("DEV1", "n-1", 5_000, 1_500) is False  # still remembered
        assert nonces.add("DEV1", "n-1", 9_000, 3_000) is True  # expired at 2,000: a new request
        assert len(nonces) == 1
    finally:
        nonces.close()


def test_concurrent_requests_share_one_flush_and_each_waits_for_it(tmp_path: Path) -> None:
    # A home server authenticates many devices' requests at once (thread pool). Each nonce
    # must be on the disk before its request is served (a replay after a power cut must
    # still fail), but the requests need not flush one by one: those arriving while a
    # flush runs share the next one (group commit, edgeq.store.commits).
    disk = SlowDisk(hold_first=True)
    nonces = SqliteNonces(tmp_path / "nonces.db", flush=disk)
    answers: dict[str, bool] = {}
    done = {f"n-{i}": threading.Event() for i in range(8)}

    def request(nonce: str) -> None:
        answers[nonce] = nonces.add("DEV1", nonce, 10_000, 1_000)
        done[nonce].set()

    first = threading.Thread(target=request, args=("n-0",))
    first.start()
    until(lambda: disk.log == ["start 1"], "the first request's flush to begin")
    others = [threading.Thread(target=request, args=(f"n-{i}",)) for i in range(1, 8)]
    for thread in others:
        thread.start()
    until(lambda: nonces.sync_stats().waiting == 7, "seven more requests to wait for the next flush")
    assert not any(event.is_set() for event in done.values())  # nobody served before its flush
    disk.release()
    for thread in (first, *others):
        thread.join(TIMEOUT)
    assert answers == {f"n-{i}": True for i in range(8)}
    stats = nonces.sync_stats()
    assert (stats.commits, stats.syncs) == (8, 2)  # eight nonces, two flushes
    assert disk.log[-1] == "end 2"
    nonces.close()
    reopened = SqliteNonces(tmp_path / "nonces.db")
    try:
        assert reopened.add("DEV1", "n-5", 10_000, 1_000) is False  # remembered across a restart
    finally:
        reopened.close()


def test_a_replayed_nonce_waits_for_no_flush(tmp_path: Path) -> None:
    disk = SlowDisk()
    nonces = SqliteNonces(tmp_path / "nonces.db", flush=disk)
    try:
        assert nonces.add("DEV1", "n-1", 10_000, 1_000) is True
        assert nonces.add("DEV1", "n-1", 10_000, 1_000) is False
        assert nonces.sync_stats().commits == 1 and disk.log == ["start 1", "end 1"]
    finally:
        nonces.close()


def test_at_synchronous_normal_no_request_waits_for_the_disk(tmp_path: Path) -> None:
    disk = SlowDisk()
    nonces = SqliteNonces(tmp_path / "nonces.db", synchronous="NORMAL", flush=disk)
    try:
        assert nonces.add("DEV1", "n-1", 10_000, 1_000) is True
        assert nonces.sync_stats().commits == 0 and disk.log == []
    finally:
        nonces.close()
