"""The shared argument checks (edgeq.args), as every verb that takes such an argument
answers: a bool is no number, a wrong type is InvalidType, a wrong value InvalidArgument,
both worded once ("<name> must be a positive int, not 0")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeq import QueueManager, args
from edgeq.encoding.cbor import DecodeLimits
from edgeq.errors import InvalidArgument, InvalidType
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.server.auth import SignatureAuthenticator
from edgeq.sync.server.nonces import MemoryNonces


@pytest.fixture
def qm(tmp_path: Path) -> Iterator[QueueManager]:
    qm = QueueManager(tmp_path / "q.db", name="HOME", journal="server")
    yield qm
    qm.close()


def _agent(qm: QueueManager, **options: Any) -> None:
    SyncAgent(qm, "http://127.0.0.1:9", allow_insecure_http=True, **options).close()


def _started(qm: QueueManager, interval_s: object) -> None:
    agent = SyncAgent(qm, "http://127.0.0.1:9", allow_insecure_http=True)
    try:
        agent.start(interval_s)  # type: ignore[arg-type]
    finally:
        agent.close()


def _authenticator(qm: QueueManager, skew_ms: object) -> None:
    SignatureAuthenticator(qm, MemoryNonces(), skew_ms=skew_ms)  # type: ignore[arg-type]


CASES: list[tuple[str, Callable[[QueueManager, Path], object], type[Exception], str]] = [
    ("max_depth=True", lambda qm, tmp: DecodeLimits(max_depth=True), InvalidType,
     "max_depth must be a positive int, not True"),
    ("max_items=0", lambda qm, tmp: DecodeLimits(max_items=0), InvalidArgument,
     "max_items must be a positive int, not 0"),
    ("batch_size=0", lambda qm, tmp: _agent(qm, batch_size=0), InvalidArgument,
     "batch_size must be a positive int, not 0"),
    ("batch_size=True", lambda qm, tmp: _agent(qm, batch_size=True), InvalidType,
     "batch_size must be a positive int, not True"),
    ("interval_s='5'", lambda qm, tmp: _started(qm, "5"), InvalidArgument,
     "interval_s must be a positive number of seconds, not '5'"),
    ("interval_s=0", lambda qm, tmp: _started(qm, 0), InvalidArgument,
     "interval_s must be a positive number of seconds, not 0"),
    ("skew_ms='5'", lambda qm, tmp: _authenticator(qm, "5"), InvalidType,
     "skew_ms must be a positive int, not '5'"),
    ("skew_ms=0", lambda qm, tmp: _authenticator(qm, 0), InvalidArgument,
     "skew_ms must be a positive int, not 0"),
    ("after_id='0'", lambda qm, tmp: qm.journal_since("0"), InvalidType,  # type: ignore[arg-type]
     "after_id must be an int of 0 or more, not '0'"),
    ("after_id=-1", lambda qm, tmp: qm.journal_since(-1), InvalidArgument,
     "after_id must be an int of 0 or more, not -1"),
    ("limit=0", lambda qm, tmp: qm.journal_since(0, limit=0), InvalidArgument,
     "limit must be a positive int, not 0"),
]


@pytest.mark.parametrize(("case", "call", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_each_check_refuses_in_one_wording(
    case: str, call: Callable[[QueueManager, Path], object], error: type[Exception], message: str,
    qm: QueueManager, tmp_path: Path,
) -> None:
    with pytest.raises(error) as refused:
        call(qm, tmp_path)
    assert str(refused.value) == message


@pytest.mark.parametrize(("check", "value", "expected"), [
    (lambda v: args.check_confirm_id(v), 7, 7),
    (lambda v: args.check_positive(v, "count"), 500, 500),
    (lambda v: args.check_non_negative(v, "after_id"), 0, 0),
    (lambda v: args.check_int(v, "clock_offset_ms"), -250, -250),
    (lambda v: args.check_seconds(v, "interval_s"), 5, 5.0),
    (lambda v: str(args.check_uid(v)), "DEV1.42", "DEV1.42"),
    (lambda v: args.check_stamp(v, "below"), 5, 5),
    (lambda v: args.check_limit(v, "max_store_bytes"), 64 * 1024 * 1024, 67108864),
    (lambda v: args.check_limit(v, "max_store_bytes"), None, None),
])
def test_a_good_value_passes_as_its_type(
    check: Callable[[object], object], value: object, expected: object
) -> None:
    got = check(value)
    assert (got, type(got)) == (expected, type(expected))
