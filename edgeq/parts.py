"""The parts a :class:`~edgeq.manager.QueueManager` delegates to, each built once when it opens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from edgeq.clock import ManualClock, system_clock
from edgeq.consume.consumers import Consumers
from edgeq.consume.waiting import Waker
from edgeq.crypto import CIPHERS, StoreKeys
from edgeq.errors import EdgeqError, InvalidArgument, InvalidType
from edgeq.events.bindings import RuleBook, attach_stored
from edgeq.events.dispatch import Dispatcher
from edgeq.events.sink import EventSink
from edgeq.exchange.holds import Holds
from edgeq.exchange.transmit import Transmitter
from edgeq.exchange.verbs import Exchange
from edgeq.gets import Gets
from edgeq.names import check_name
from edgeq.puts import Puts
from edgeq.queues.budget import OverflowTally, check_store_budget
from edgeq.queues.catalog import QueueCatalog
from edgeq.queues.checkpoints import ExpiryPolicy
from edgeq.sealer import Sealer
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.store.devices import DeviceRegistry
from edgeq.store.journal import JournalSide
from edgeq.store.meta import create_store, journal_setting, name_needed, open_identity
from edgeq.store.opening import check_foreign
from edgeq.store.rules import RuleTx
from edgeq.store.schema import SCHEMA_VERSION
from edgeq.types import Clock, Durability

if TYPE_CHECKING:
    from edgeq.rules.base import RuleHost

__all__ = ["Parts", "build_parts", "start_rules"]


@dataclass(frozen=True)
class Parts:
    """An open store and the parts its queue manager's verbs delegate to."""

    path: Path
    name: str
    clock: Clock
    max_store_bytes: int | None
    db: ConnectionFactory
    waker: Waker
    unwatch: Callable[[], None] | None
    rules: Dispatcher
    sealer: Sealer
    sink: EventSink
    expiry: ExpiryPolicy
    gets: Gets
    transmitter: Transmitter
    puts: Puts
    catalog: QueueCatalog
    rulebook: RuleBook
    devices: DeviceRegistry
    consumers: Consumers
    exchange: Exchange


def build_parts(
    host: RuleHost, path: str | Path, name: str | None, *, durability: Durability, timeout: float,
    clock: Clock | None, rule_retry_limit: int, rule_retry_base_ms: int, remember_confirmed_ms: int | None,
    journal: JournalSide | Literal["off"] | None, keys: StoreKeys | str | Path | None,
    default_encryption: str | None, max_store_bytes: int | None,
) -> Parts:
    """Check every option before the file is touched, then open the store and build the parts."""
    if not isinstance(path, (str, Path)):
        raise InvalidType(f"path must be a str or Path, not {type(path).__name__}")
    if name is not None:
        check_name(name, "queue manager name")
    if clock is not None and not callable(clock):
        raise InvalidType("clock must be a callable returning epoch milliseconds")
    path = Path(path)
    retries = (("rule_retry_limit", rule_retry_limit), ("rule_retry_base_ms", rule_retry_base_ms))
    for label, value in retries:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgument(f"{label} must be a positive int, not {value!r}")
    if remember_confirmed_ms is not None and (
        isinstance(remember_confirmed_ms, bool) or not isinstance(remember_confirmed_ms, int)
        or remember_confirmed_ms < 1
    ):
        raise InvalidArgument(
            f"remember_confirmed_ms must be a positive int or None, not {remember_confirmed_ms!r}")
    if journal not in (None, "server", "device", "off"):
        raise InvalidArgument(f"journal must be 'server', 'device', 'off' or None, not {journal!r}")
    if default_encryption is not None and default_encryption not in CIPHERS:
        raise InvalidArgument(f"default_encryption must be one of {', '.join(CIPHERS)} or None")
    if isinstance(keys, (str, Path)):
        keys = StoreKeys.load(keys)
    elif keys is not None and not isinstance(keys, StoreKeys):
        raise InvalidType("keys must be a StoreKeys ring or the path of a store key file")
    max_store_bytes = check_store_budget(max_store_bytes)
    now: Clock = clock or system_clock
    keys = keys if keys is not None else StoreKeys.from_env()
    db = ConnectionFactory(path, durability=durability, timeout=timeout)
    waker = Waker(db, close_timeout_s=timeout)  # every commit that changed a row wakes waiting gets
    db.on_commit = waker.notify
    # A manual clock moved on may end a redelivery delay: waiting gets look again.
    unwatch = clock.watch(waker.notify) if isinstance(clock, ManualClock) else None
    # Nothing is written before the file is recognised, and a new store is made
    # whole or not at all: a failed open leaves no file behind (edgeq.store.meta).
    if check_foreign(path, newest=SCHEMA_VERSION):
        if name is None:
            raise name_needed(path)
        if not path.exists():
            create_store(path, name, now, timeout=timeout)
    with _closed_on_error(db, path):
        name, origin = open_identity(db, path, name, now)
        sealer = Sealer(name, keys, default_encryption)
        sealer.check_keys(db, path)
        rules = Dispatcher(name, db, now, retry_limit=rule_retry_limit, retry_base_ms=rule_retry_base_ms,
                           unseal=sealer.unseal_for_rules)
        sink = EventSink(name, db, now, rules, journal_setting(db, journal))
        expiry = ExpiryPolicy(name, sink)
        overflowed = OverflowTally()
        gets = Gets(name, sink, sealer, expiry, overflowed)
        transmitter = Transmitter(name, origin, sink, expiry, gets)
        puts = Puts(name, origin, sink, sealer, expiry, transmitter, remember_confirmed_ms,
                    max_store_bytes=max_store_bytes, overflowed=overflowed)
        catalog = QueueCatalog(name, host, sink, sealer, expiry, max_store_bytes=max_store_bytes,
                               overflowed=overflowed)
        devices = DeviceRegistry(db, now)
        exchange = Exchange(name, puts, transmitter, sink, Holds(name, sink), devices)
        return Parts(path, name, now, max_store_bytes, db, waker, unwatch, rules, sealer, sink, expiry, gets,
                     transmitter, puts, catalog, RuleBook(name, host, sink), devices, Consumers(gets, waker),
                     exchange)


def start_rules(parts: Parts, host: RuleHost) -> None:
    """Attach the stored rule bindings to ``host`` and recover their events: plugins load here."""
    with _closed_on_error(parts.db, parts.path):
        with parts.db.read() as conn:
            stored = RuleTx(conn).bindings()
        for queue, bindings in attach_stored(host, stored).items():
            parts.rules.set_persisted(queue, bindings)
        parts.rules.recover()


@contextmanager
def _closed_on_error(db: ConnectionFactory, path: Path) -> Iterator[None]:
    try:
        yield
    except EdgeqError:
        db.close()
        raise
    except Exception as exc:  # never a raw Python error from a damaged file's bytes
        db.close()
        raise damaged(f"opening it failed ({type(exc).__name__}: {exc})", path=str(path)) from exc
    except BaseException:
        db.close()
        raise
