"""Random byte flips in a store file: every read gives back exactly what was put, or
says the store is damaged (:class:`StoreError`, :class:`IntegrityError`), or finds the
message missing. Never a changed message, never any other exception, never the same
uid twice in one call, never a message delivered twice.

A child process builds the store on a real SQLite file: clear and encrypted queues,
FIFO and priority, typed fields, correlation ids, expiries (most far in the future,
some already past when the parent reads), assured-put-locked and get-locked
messages, a remote queue, and a queue with a persisted rule whose last events the
child never saw delivered (it exits without closing). The parent then, per trial,
flips 1 to 4 random bytes at random offsets of a copy (seeded) and reads everything.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from edgeq import Int32, Int64, ManualClock, Message, QueueManager
from edgeq.crypto import StoreKeys
from edgeq.errors import MessageNotFound, StoreError
from edgeq.rules import QueueRule
from edgeq.rules.base import RuleEvent
from edgeq.types import FieldValue
from tests.conftest import T0

ROOT = Path(__file__).resolve().parents[2]
WITNESS_LOG = "tests.check.test_corruption.witness"
#: The parent reads at T1: messages with a 1 s expiry (put at T0) have expired by then.
T1 = T0 + 5_000
PUT_CONFIRM_ID = 501  # the child's unconfirmed assured puts
GET_CONFIRM_ID = 601  # the child's unconfirmed assured gets
PARENT_CONFIRM_ID = 901
LOCAL = {
    "CP": {"ordering": "priority"},
    "CF": {"ordering": "fifo", "expiry_ms": 10**9},
    "EP": {"ordering": "priority", "encryption": "aes-256-gcm"},
    "EF": {"ordering": "fifo", "encryption": "aes-256-gcm", "expiry_ms": 10**9},
    "RULED": {"ordering": "priority", "rules": [("tests.check.test_corruption:Witness", {})]},
}
REMOTE = "OUT"
SEEDS = (1, 2, 3, 4)
TRIALS = 80

R = TypeVar("R")


class Witness(QueueRule):
    """Logs every message event with its event, for the parent to compare with what was put."""

    def _seen(self, event: RuleEvent) -> None:
        logging.getLogger(WITNESS_LOG).info("seen", extra={"witness": event})

    on_removed = on_expired = _seen


@dataclass(frozen=True)
class Spec:
    """One message of the corpus and what the child does with it."""

    queue: str
    message: Message
    how: str  # ready, put-locked, expiring (ready, past its deadline at T1)


def corpus() -> list[Spec]:
    """The messages the child puts: the same every run (seeded)."""
    rng = random.Random(20251121)
    out: list[Spec] = []
    for queue in (*LOCAL, REMOTE):
        for n in range(30):
            how = "put-locked" if n in (3, 11, 23) else "expiring" if n in (5, 14, 26) else "ready"
            fields: dict[str, FieldValue] = {"n": Int32(n), "kind": "even" if n % 2 == 0 else "odd"}
            if n % 3 == 0:
                fields.update(big=Int64(2**40 + n), ratio=n / 7, flag=n % 2 == 0, raw=rng.randbytes(6))
            if how == "expiring":
                expiry: Int32 | Int64 | None = Int32(1_000)
            else:
                expiry = rng.choice([None, Int32(2_000_000_000), Int64(T0 + 10**11)])
            out.append(Spec(queue, Message(
                f"{queue}:{n}:".encode() + rng.randbytes(rng.choice((8, 40, 300, 900))),
                fields=fields if n % 4 != 1 else {},
                priority=rng.choice([None, 0, 3, 7, 9]),
                expiry=expiry,
                correlation_id=rng.randbytes(12) if n % 2 else None,
                reply_to="REPLIES" if n % 5 == 0 else None,
            ), how))
    return out


def build_store(path: str, key_file: str) -> None:
    """The child: build the store, print what is where, exit without closing (so the
    persisted rule's last events stay undelivered in the file)."""
    import json

    qm = QueueManager(path, name="DEV1", clock=ManualClock(T0), keys=key_file)
    for name, attrs in LOCAL.items():
        qm.define_queue(name, **attrs)  # type: ignore[arg-type]
    qm.define_remote_queue(REMOTE, target_qmgr="HOME")
    uids: list[tuple[str, str, int]] = []
    for index, spec in enumerate(corpus()):
        confirm_id = PUT_CONFIRM_ID if spec.how == "put-locked" else None
        uids.append((spec.queue, str(qm.put(spec.queue, spec.message, confirm_id=confirm_id)), index))
    locked = {q: [str(m.uid) for m in qm.get_many(q, 3, confirm_id=GET_CONFIRM_ID)] for q in LOCAL}
    consumed = [str(m.uid) for m in qm.get_many("RULED", 2)]  # their events: recorded, never flushed
    print(json.dumps({"uids": uids, "get_locked": locked, "consumed": consumed}), flush=True)
    os._exit(0)


@dataclass
class Store:
    """The pristine store the child built, and what it holds."""

    path: Path
    keys: StoreKeys
    expected: dict[tuple[str, str], Message]  # (queue, uid) -> what was put
    how: dict[tuple[str, str], str]
    get_locked: dict[str, list[str]]
    consumed: list[str]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    import json

    base = tmp_path_factory.mktemp("flip")
    path, key_file = base / "pristine.db", base / "store.key"
    keys = StoreKeys.generate()
    keys.save(key_file)
    script = (f"from tests.check.test_corruption import build_store; build_store({str(path)!r}, "
              f"{str(key_file)!r})")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # Fold the WAL into the file, so every committed byte is in the one file flipped.
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert not Path(f"{path}-wal").exists()
    specs = corpus()
    expected = {(q, uid): specs[i].message for q, uid, i in report["uids"]}
    how = {(q, uid): specs[i].how for q, uid, i in report["uids"]}
    return Store(path, keys, expected, how, report["get_locked"], report["consumed"])


# -- the comparison ------------------------------------------------------------------------


def _typed(value: object) -> tuple[str, object]:
    return (type(value).__name__, value)


def same(got: Message, want: Message) -> bool:
    """Whether a message read back is, field by field, the message that was put."""
    return (
        got.data == want.data
        and {k: _typed(v) for k, v in got.fields.items()} == {k: _typed(v) for k, v in want.fields.items()}
        and got.priority == (4 if want.priority is None else want.priority)
        and _typed(got.expiry) == _typed(want.expiry)
        and got.correlation_id == want.correlation_id
        and got.reply_to == want.reply_to
        and got.expiry_report == want.expiry_report
        and got.created_ms == T0
    )


@dataclass
class Trial:
    """What one trial saw: store errors by operation, and anything forbidden."""

    store_errors: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)
    forbidden: list[str] = field(default_factory=list)
    delivered: set[str] = field(default_factory=set)

    def call(self, what: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R | None:
        """``fn(...)``: a StoreError is an allowed outcome, any other exception is not,
        except "not found" from the calls that address a lock (``undo``, ``confirm_get``):
        that is how they say "missing" (a flipped lock state or confirm id is not
        detected, docs/storage.md)."""
        try:
            return fn(*args, **kwargs)
        except StoreError:
            self.store_errors[what] += 1
            return None
        except MessageNotFound as exc:
            if what not in ("undo", "confirm_get"):
                self.forbidden.append(f"{what}: raised {type(exc).__name__}: {exc}")
            self.missing[what] += 1
            return None
        except Exception as exc:
            self.forbidden.append(f"{what}: raised {type(exc).__name__}: {exc}")
            return None

    def check(self, what: str, store: Store, queue: str, messages: Sequence[Message], *,
              taken: bool, hidden: frozenset[str] = frozenset()) -> None:
        """Each message is one that was put there, unchanged; no uid twice in the call;
        nothing expired, consumed by the child or ``hidden`` (locked); nothing taken twice
        in the trial."""
        uids = [str(m.uid) for m in messages]
        for uid, count in Counter(uids).items():
            if count > 1:
                self.forbidden.append(f"{what}: returned {uid} {count} times in one call")
        for m in messages:
            key = (queue, str(m.uid))
            want = store.expected.get(key)
            if want is None:
                self.forbidden.append(f"{what}: returned a uid never put on {queue}: {m!r}")
            elif not same(m, want):
                self.forbidden.append(f"{what}: returned a changed message: got {m!r}, put {want!r}")
            elif store.how[key] == "expiring":
                self.forbidden.append(f"{what}: returned an expired message {m.uid}")
            elif str(m.uid) in hidden or str(m.uid) in store.consumed:
                self.forbidden.append(f"{what}: returned {m.uid}, which is locked or was consumed")
            if taken:
                if str(m.uid) in self.delivered:
                    self.forbidden.append(f"{what}: delivered {m.uid} a second time")
                self.delivered.add(str(m.uid))


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[RuleEvent] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append(record.__dict__["witness"])


@contextmanager
def witnessed() -> Iterator[_Capture]:
    """The events the :class:`Witness` rule is given while the block runs."""
    capture, logger = _Capture(), logging.getLogger(WITNESS_LOG)
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    try:
        yield capture
    finally:
        logger.removeHandler(capture)


@dataclass
class Flips:
    """Outcomes over the trials of one seed."""

    trials: int = 0
    clean: int = 0  # no error, nothing forbidden
    refused_open: int = 0  # the constructor raised StoreError
    store_errors: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)
    forbidden: list[str] = field(default_factory=list)


def flip(source: Path, target: Path, rng: random.Random) -> list[int]:
    """Copy ``source`` to ``target`` with 1-4 bytes flipped at random offsets; return them."""
    data = bytearray(source.read_bytes())
    offsets = [rng.randrange(len(data)) for _ in range(rng.randint(1, 4))]
    for offset in offsets:
        data[offset] ^= rng.randrange(1, 256)
    target.write_bytes(bytes(data))
    return offsets


def read_everything(qm: QueueManager, store: Store, trial: Trial) -> None:
    """Every read path, each result compared with what was put."""
    for queue in LOCAL:
        put_locked = [uid for (q, uid), how in store.how.items() if q == queue and how == "put-locked"]
        locked = frozenset([*put_locked, *store.get_locked[queue]])
        trial.call("queue_attributes", qm.queue_attributes, queue)
        trial.call("depth", qm.depth, queue)
        browsed = trial.call("browse", qm.browse, queue) or []
        trial.check("browse", store, queue, browsed, taken=False, hidden=locked)
        odd = trial.call("browse(filter)", qm.browse, queue, filter={"kind": "odd"}) or []
        trial.check("browse(filter)", store, queue, odd, taken=False, hidden=locked)
        # the child's get locks: handed back, visible again at once (no backout, so no redelivery delay)
        trial.call("undo", qm.undo, queue, GET_CONFIRM_ID, count_backout=False)
        got = trial.call("assured get", qm.get, queue, confirm_id=PARENT_CONFIRM_ID)
        if got is not None:
            trial.check("assured get", store, queue, [got], taken=True)
            trial.call("confirm_get", qm.confirm_get, queue, got.uid)  # type: ignore[arg-type]
        trial.call("confirm_put_each", qm.confirm_put_each, queue, put_locked)
        even = trial.call("get(filter)", qm.get, queue, filter={"kind": "even"})
        trial.check("get(filter)", store, queue, [even] if even is not None else [], taken=True)
        trial.check("get_many", store, queue, trial.call("get_many", qm.get_many, queue, 1_000) or [],
                    taken=True)
        trial.call("depth after", qm.depth, queue)
    outbound = trial.call("next_for_transmission", qm.exchange.next_for_transmission, REMOTE, 1_000) or []
    unconfirmed = frozenset(uid for (q, uid), how in store.how.items() if q == REMOTE and how == "put-locked")
    trial.check("next_for_transmission", store, REMOTE, outbound, taken=False, hidden=unconfirmed)
    trial.call("transmitted", qm.exchange.transmitted, REMOTE,  # type: ignore[misc]
               [m.uid for m in outbound])
    trial.call("quarantined", qm.quarantined)


def check_rule_copies(events: Sequence[RuleEvent], store: Store, trial: Trial) -> None:
    """A rule's copy of a message is the message put, unless the event says it was
    quarantined (then it carries no data and no fields)."""
    for event in events:
        message = event.message
        if message is None:
            continue
        if event.reason == "quarantined":
            if message.data or message.fields:
                trial.forbidden.append(f"rule copy of quarantined {message.uid} carries data")
            continue
        want = store.expected.get((event.queue, str(message.uid)))
        if want is None or not same(message, want):
            trial.forbidden.append(
                f"rule {event.kind}/{event.reason or event.where}: changed copy {message!r}")


def run_trial(store: Store, copy: Path, rng: random.Random, flips: Flips) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{copy}{suffix}").unlink(missing_ok=True)
    offsets = flip(store.path, copy, rng)
    trial = Trial()
    with witnessed() as capture:
        # durability "normal": what is tested is reading, and the trials stay quick
        qm = trial.call("open", QueueManager, copy, clock=ManualClock(T1), keys=store.keys,
                        durability="normal")
        if qm is None:
            flips.refused_open += not trial.forbidden
        else:
            try:
                read_everything(qm, store, trial)
            finally:
                trial.call("close", qm.close)
    check_rule_copies(capture.events, store, trial)
    flips.trials += 1
    flips.clean += not trial.store_errors and not trial.missing and not trial.forbidden
    flips.store_errors.update(trial.store_errors)
    flips.missing.update(trial.missing)
    flips.forbidden += [f"flips at {offsets}: {f}" for f in trial.forbidden]


def test_the_pristine_store_reads_back_exactly(store: Store, tmp_path: Path) -> None:
    """The harness itself: with no flip, every message comes back, once, unchanged."""
    copy = tmp_path / "copy.db"
    shutil.copy(store.path, copy)
    trial = Trial()
    with witnessed() as capture, QueueManager(copy, clock=ManualClock(T1), keys=store.keys) as qm:
        read_everything(qm, store, trial)
    check_rule_copies(capture.events, store, trial)
    assert trial.forbidden == [] and not trial.store_errors
    live = {key for key, how in store.how.items() if how != "expiring" and key[0] != REMOTE}
    consumed = set(store.consumed)
    assert trial.delivered == {uid for _q, uid in live} - consumed
    assert {str(e.message.uid) for e in capture.events if e.reason == "got" and e.message} >= consumed


@pytest.mark.parametrize("seed", SEEDS)
def test_flipped_bytes_are_reported_never_returned_as_data(store: Store, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    flips = Flips()
    for _ in range(TRIALS):
        run_trial(store, tmp_path / "copy.db", rng, flips)
    summary = (
        f"seed {seed}: {flips.trials} trials, {flips.clean} clean, {flips.refused_open} refused at open, "
        f"store errors by call {dict(flips.store_errors)}, not found {dict(flips.missing)}, "
        f"{len(flips.forbidden)} forbidden outcomes"
    )
    print(summary)
    assert flips.forbidden == [], summary + "\n" + "\n".join(flips.forbidden[:40])
