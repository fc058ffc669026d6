"""Shared fixtures: a real SQLite file per test, and a clock the test controls."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeq import ManualClock, QueueManager
from edgeq.crypto import StoreKeys
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent

T0 = 1_763_683_200_000  # 2025-11-21T00:00:00Z, in epoch ms
_LOGGERS = ("edgeq", "edgeq.sync", "edgeq.sync.agent", "edgeq.sync.server", "uvicorn", "uvicorn.error")


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """Whatever a test does to edgeq's loggers (a command run in-process configures them)
    is undone after it, so no test sees another's log levels or handlers."""
    saved = {name: (lg.handlers[:], lg.propagate, lg.level, lg.disabled)
             for name in _LOGGERS for lg in (logging.getLogger(name),)}
    yield
    for name, (handlers, propagate, level, disabled) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.propagate, logger.disabled = handlers, propagate, disabled
        logger.setLevel(level)


@pytest.hookimpl(tryfirst=True)  # before xdist's own
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test``'s ``--dist loadscope``, the pipeline's tests as one unit, the longest units first
    (tests/xdist_scopes.py; imported here, so that the scripts and helpers that import this module need
    no xdist)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from tests.xdist_scopes import PipelineAsOneScope

    return PipelineAsOneScope(config, log)


class Recorder(QueueRule):
    """A rule that records every event it is given, for assertions."""

    def __init__(self) -> None:
        self.events: list[RuleEvent] = []

    def _record(self, event: RuleEvent) -> None:
        self.events.append(event)

    on_activated = on_added = on_removed = on_expired = _record
    on_duplicate = on_threshold = on_closed = on_queue_deleted = _record

    @property
    def calls(self) -> list[tuple[str, object, object]]:
        """(kind, message or queue, where or reason) of every event, in order."""
        return [
            (e.kind, e.message if e.message is not None else e.queue, e.where or e.reason)
            for e in self.events
        ]

    def expired(self) -> list[tuple[bytes, object]]:
        """(data, where) of every expiry seen, in order."""
        return [(e.message.data, e.where) for e in self.events if e.kind == "expired" and e.message]

    def removed(self) -> list[tuple[bytes, object]]:
        return [(e.message.data, e.reason) for e in self.events if e.kind == "removed" and e.message]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "device.db"


# One key ring for the whole run: making AES keys is not what these tests test.
STORE_KEYS = StoreKeys.generate()


@pytest.fixture(params=["plain", "encrypted"])
def store_mode(request: pytest.FixtureRequest) -> str:
    """Every test that opens its queue manager through ``open_qm`` runs twice: on plain
    queues, and with every queue encrypted at rest (the suite must pass unchanged)."""
    return str(request.param)


@pytest.fixture
def open_qm(db_path: Path, clock: ManualClock, store_mode: str) -> Iterator[Callable[..., QueueManager]]:
    """Open (or reopen) the test's queue manager; all are closed at teardown."""
    opened: list[QueueManager] = []

    def _open(**kwargs: object) -> QueueManager:
        kwargs.setdefault("name", "DEV1")
        kwargs.setdefault("clock", clock)
        if store_mode == "encrypted":
            kwargs.setdefault("keys", STORE_KEYS)
            kwargs.setdefault("default_encryption", "aes-256-gcm")
        qm = QueueManager(db_path, **kwargs)  # type: ignore[arg-type]
        opened.append(qm)
        return qm

    yield _open
    for qm in opened:
        qm.close()


@pytest.fixture
def qm(open_qm: Callable[..., QueueManager]) -> QueueManager:
    return open_qm()


@pytest.fixture
def rule() -> Recorder:
    return Recorder()
