"""The queue catalog: defining, altering, inquiring and deleting queues of every kind, with their
persisted rule bindings."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from edgeq.errors import InvalidArgument, QueueExists, QueueNotEmpty, QueueNotFound
from edgeq.events.bindings import RuleSpec, build_bindings, check_specs
from edgeq.events.dispatch import Binding, Pending
from edgeq.events.sink import EventSink
from edgeq.names import check_name
from edgeq.queues.attributes import (
    QueueAttributes,
    QueueUsage,
    StoreUsage,
    check_attributes,
    check_redelivery,
    require_queue,
)
from edgeq.queues.budget import OverflowTally
from edgeq.queues.checkpoints import ExpiryPolicy
from edgeq.sealer import Sealer
from edgeq.store.meta import journal_is_explicit
from edgeq.store.records import QueueRow
from edgeq.store.rules import RuleTx
from edgeq.store.tx import Tx
from edgeq.types import DEFAULT_MAX_REDELIVERY_DELAY_MS, DEFAULT_REDELIVERY_DELAY_MS

if TYPE_CHECKING:
    from edgeq.rules import QueueRule
    from edgeq.rules.base import RuleHost

__all__ = ["QueueCatalog"]


class QueueCatalog:
    """The queues of one queue manager; rules of new bindings attach to ``host``."""

    def __init__(
        self, qm_name: str, host: RuleHost, sink: EventSink, sealer: Sealer, expiry: ExpiryPolicy,
        *, max_store_bytes: int | None = None, overflowed: OverflowTally | None = None,
    ) -> None:
        self.qm_name = qm_name
        self.host = host
        self.sink = sink
        self.sealer = sealer
        self.expiry = expiry
        self.clock = sink.clock
        self.max_store_bytes = max_store_bytes
        self.overflowed = overflowed if overflowed is not None else OverflowTally()

    def define_queue(self, name: str, rules: Sequence[RuleSpec] | None, encryption: str | None,
                     exist_ok: bool = False, **attributes: Any) -> None:
        self.define(
            name, attributes, rules, {"encryption": self.sealer.cipher(encryption)}, exist_ok=exist_ok
        )

    def define(
        self, name: str, attributes: dict[str, Any], rules: Sequence[RuleSpec] | None,
        kind: Mapping[str, str | None] | None = None, *, exist_ok: bool = False,
    ) -> None:
        """Define a queue of any kind, its bindings stored with it; with ``exist_ok``, one defined
        exactly so already is left as it is."""
        check_name(name, "queue name")
        attrs = check_attributes(attributes)
        _remote_only(attrs, (kind or {}).get("kind"))
        defaults = (DEFAULT_REDELIVERY_DELAY_MS, DEFAULT_MAX_REDELIVERY_DELAY_MS)
        _check_delays(attrs, name, (kind or {}).get("kind"), defaults)
        specs = check_specs(rules) if rules is not None else []
        built = build_bindings(self.host, name, specs)  # validates every config before anything is stored
        with self.sink.write() as tx:
            existing = tx.queue(name)
            if existing is not None:
                if exist_ok:
                    _check_same(tx, existing, {"kind": "local", **attrs, **(kind or {})}, specs, self.qm_name)
                    return
                raise QueueExists(
                    f"queue {name!r} is already defined on {self.qm_name}: use alter_queue to change it "
                    "(or exist_ok=True to accept the same definition)"
                )
            _check_backout(tx, name, attrs.get("backout_threshold"), attrs.get("backout_queue"),
                           (kind or {}).get("kind"), (kind or {}).get("encryption"))
            tx.insert_queue(name, {**attrs, **(kind or {})}, self.clock())
            bound = self._bind(tx, require_queue(tx, self.qm_name, name), specs, built) if specs else []
        if bound:
            self.sink.rules.set_persisted(name, bound)

    def _bind(
        self, tx: Tx, queue: QueueRow, specs: list[tuple[str, dict[str, Any]]], rules: list[QueueRule]
    ) -> list[Binding]:
        ids = RuleTx(tx.conn).replace_bindings(queue.id, specs)
        return [
            Binding(f"b{i}", name, rule, persisted=True, config=config)
            for i, (name, config), rule in zip(ids, specs, rules, strict=True)
        ]

    def alter_queue(self, name: str, **attributes: Any) -> QueueAttributes:
        check_name(name, "queue name")
        if not attributes:
            raise InvalidArgument("alter_queue needs at least one attribute to change, e.g. expiry_ms=60000")
        specs = check_specs(attributes.pop("rules")) if "rules" in attributes else None
        check_attributes(attributes)
        built = build_bindings(self.host, name, specs) if specs is not None else []
        with self.sink.write() as tx:
            queue = require_queue(tx, self.qm_name, name)
            _remote_only(attributes, queue.kind)
            _check_delays(
                attributes, name, queue.kind, (queue.redelivery_delay_ms, queue.max_redelivery_delay_ms)
            )
            if "backout_threshold" in attributes or "backout_queue" in attributes:
                _check_backout(
                    tx, name, attributes.get("backout_threshold", queue.backout_threshold),
                    attributes.get("backout_queue", queue.backout_queue), queue.kind, queue.encryption,
                )
            if attributes:
                tx.update_queue(queue.id, attributes)
            if "expiry_ms" in attributes and attributes["expiry_ms"] != queue.expiry_ms:
                tx.retime(queue.id, attributes["expiry_ms"])
            if "ordering" in attributes and attributes["ordering"] != queue.ordering:
                tx.rerank(queue.id, attributes["ordering"] == "priority")
            bound = self._bind(tx, queue, specs, built) if specs is not None else None
            result = QueueAttributes.from_row(require_queue(tx, self.qm_name, name))
        if bound is not None:
            self.sink.rules.set_persisted(name, bound)
        return result

    def queue_attributes(self, name: str) -> QueueAttributes:
        check_name(name, "queue name")
        with self.sink.db.read() as conn:
            return QueueAttributes.from_row(require_queue(Tx(conn), self.qm_name, name))

    def queue_usage(self, name: str) -> QueueUsage:
        """What a queue holds against its budget, expired messages discarded first (as ``depth``)."""
        self.expiry.touch(name)
        self.expiry.discard_expired(name, "depth")
        with self.sink.db.read() as conn:
            queue = require_queue(Tx(conn), self.qm_name, name)
            usage = QueueUsage.from_row(queue, self.overflowed.get(name))
            if not self.sink.db.read_only:
                return usage
            count, size = Tx(conn).expired_totals(queue.id, self.clock())  # kept, so left out
            return replace(usage, depth=usage.depth - count, bytes=usage.bytes - size)

    def store_usage(self) -> StoreUsage:
        """What the store holds, nothing discarded (a monitor may read it as often as it likes)."""
        with self.sink.db.read() as conn:
            queues = tuple(QueueUsage.from_row(q, self.overflowed.get(q.name)) for q in Tx(conn).queues())
        return StoreUsage(sum(q.bytes for q in queues), self.max_store_bytes, queues)

    def queue_names(self) -> list[str]:
        with self.sink.db.read() as conn:
            return [q.name for q in Tx(conn).queues()]

    def delete_queue(self, name: str) -> None:
        """Delete an empty queue, expired messages purged first (MQe's "deleted" check point)."""
        self.expiry.touch(name)
        self.expiry.discard_expired(name, "delete")
        with self.sink.write() as tx:
            queue = require_queue(tx, self.qm_name, name)
            users = [q.name for q in tx.queues() if q.backout_queue == name and q.name != name]
            if users:
                raise InvalidArgument(
                    f"queue {name!r} is the backout queue of {', '.join(map(repr, users))}: give "
                    f"{'them' if len(users) > 1 else 'it'} another one, or none, first, e.g. "
                    f"alter_queue({users[0]!r}, backout_threshold=None, backout_queue=None)"
                )
            if queue.depth:
                raise QueueNotEmpty(
                    f"queue {name!r} still holds {queue.depth} unexpired message(s): get them, "
                    "or purge() the queue, before deleting it"
                )
            tx.delete_queue(queue.id)
        self.expiry.forget(name)
        self.overflowed.forget(name)
        if self.sink.rules.wants(name):
            self.sink.dispatch([Pending("queue_deleted", name, self.clock())])
        self.sink.rules.drop(name)

    def define_remote_queue(
        self, name: str, *, target_qmgr: str, target_queue: str | None, mode: Literal["async", "sync"],
        rules: Sequence[RuleSpec] | None, encryption: str | None, exist_ok: bool = False, **attributes: Any,
    ) -> None:
        check_name(target_qmgr, "target queue manager name")
        if target_queue is not None:
            check_name(target_queue, "target queue name")
        if mode not in ("async", "sync"):
            raise InvalidArgument(f"mode must be 'async' or 'sync', not {mode!r}")
        attrs = {**attributes, "ordering": "priority"}
        kind = {
            "kind": "remote", "target_qmgr": target_qmgr, "target_queue": target_queue or name, "mode": mode,
            "encryption": self.sealer.cipher(encryption),
        }
        self.define(name, attrs, rules, kind, exist_ok=exist_ok)
        self._sync_queue_defined()

    def define_home_server_queue(
        self, name: str, *, server: str, exist_ok: bool = False, **attributes: Any
    ) -> None:
        check_name(server, "home server name")
        rules = attributes.pop("rules", None)
        cipher = self.sealer.cipher(attributes.pop("encryption", None))
        defaults: dict[str, Any] = {"default_priority": 4, "ordering": "priority"}
        self.define(
            name, {**defaults, **attributes}, rules, {"kind": "home", "server": server, "encryption": cipher},
            exist_ok=exist_ok,
        )
        self._sync_queue_defined()

    def queues_of_kind(self, kind: str) -> list[QueueAttributes]:
        """The queues of one kind (``remote``, ``home``)."""
        with self.sink.db.read() as conn:
            return [QueueAttributes.from_row(q) for q in Tx(conn).queues() if q.kind == kind]

    def _sync_queue_defined(self) -> None:
        """A store never given a journal setting journals device-side expiries once it has a
        remote or home-server queue, in this process too."""
        if self.sink.journal is None and not journal_is_explicit(self.sink.db):
            self.sink.journal = "device"


def _check_backout(
    tx: Tx, name: str, threshold: int | None, backout_queue: str | None, kind: str | None,
    encryption: str | None,
) -> None:
    """Refuse backout settings that do not make sense together (both or neither; not on a remote
    queue; a defined backout queue, not the queue itself, sealed if the queue is)."""
    if threshold is None and backout_queue is None:
        return
    if kind == "remote":
        raise InvalidArgument(
            f"{name!r} is a remote queue: nothing gets from it here, so nothing is backed out; "
            "give the backout threshold to the queue the messages are got from"
        )
    if backout_queue is None:
        raise InvalidArgument(
            "backout_threshold needs a backout_queue to move poison messages to (e.g. "
            "backout_threshold=5, backout_queue='BOQ'); give both, or neither"
        )
    if threshold is None:
        raise InvalidArgument(
            "backout_queue needs a backout_threshold: how many undone gets move a message there "
            "(e.g. backout_threshold=5); give both, or neither"
        )
    if backout_queue == name:
        raise InvalidArgument(f"queue {name!r} cannot be its own backout queue: name another queue")
    target = tx.queue(backout_queue)
    if target is None:
        raise QueueNotFound(f"backout queue {backout_queue!r} is not defined: define it first, then {name!r}")
    if encryption is not None and target.encryption is None:
        raise InvalidArgument(
            f"queue {name!r} is encrypted and backout queue {backout_queue!r} is not: a moved message "
            "would be stored in clear; give it an encrypted backout queue"
        )


def _check_delays(
    attributes: Mapping[str, Any], name: str, kind: str | None, current: tuple[int, int]
) -> None:
    """Refuse redelivery delays on a remote queue, or a first longer than the most (``current``:
    the queue's, kept where not given)."""
    if not any(key in attributes for key in ("redelivery_delay_ms", "max_redelivery_delay_ms")):
        return
    if kind == "remote":
        raise InvalidArgument(
            f"{name!r} is a remote queue: nothing gets from it here, so nothing is redelivered; "
            "give the redelivery delay to the queue the messages are got from"
        )
    check_redelivery(attributes.get("redelivery_delay_ms", current[0]),
                     attributes.get("max_redelivery_delay_ms", current[1]))


def _remote_only(attributes: Mapping[str, Any], kind: str | None) -> None:
    """Refuse ``refusal_limit`` off a remote queue, and ``compression`` off a remote or home one."""
    if "refusal_limit" in attributes and kind != "remote":
        raise InvalidArgument(
            "refusal_limit applies to remote queues only (how often their target may refuse a message "
            "before it moves to the dead-letter queue): leave it out here"
        )
    if attributes.get("compression") is not None and kind not in ("remote", "home"):
        raise InvalidArgument(
            "compression applies to remote and home-server queues only (how their batches cross the "
            "wire to and from the home server): leave it out here"
        )


def _check_same(tx: Tx, existing: QueueRow, wanted: Mapping[str, Any], specs: Sequence[tuple[str, Any]],
                qm_name: str) -> None:
    """Refuse (:class:`QueueExists`) a queue defined otherwise: ``exist_ok`` never silently keeps
    another definition."""
    differ = [f"{key} {getattr(existing, key)!r}, not {value!r}" for key, value in wanted.items()
              if getattr(existing, key) != value]
    stored = [(b.name, b.config) for b in RuleTx(tx.conn).bindings(existing.name)]
    if stored != [(spec, json.loads(json.dumps(dict(config), sort_keys=True))) for spec, config in specs]:
        differ.append(f"rules {[name for name, _ in stored]}, not {[name for name, _ in specs]}")
    if differ:
        raise QueueExists(
            f"queue {existing.name!r} is already defined on {qm_name}, otherwise: {'; '.join(differ)}; "
            "change it with alter_queue (or delete it first)"
        )
