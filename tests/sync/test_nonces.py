"""edgeq.sync.nonces: the replay memory shared by every worker of a home server."""

from __future__ import annotations

from pathlib import Path

from edgeq.sync.nonces import SqliteNonces


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
