"""Rule bindings: validating, storing and re-attaching a queue's rules; the rule API (:class:`RuleBook`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgeq.args import check_int
from edgeq.errors import EdgeqError, InvalidArgument, InvalidType, RuleConfigError
from edgeq.events.dispatch import Binding
from edgeq.events.sink import EventSink
from edgeq.names import check_name
from edgeq.queues.attributes import require_queue
from edgeq.store.rules import BindingRow, FailureRow, RuleTx
from edgeq.store.tx import Tx

if TYPE_CHECKING:
    from edgeq.rules import QueueRule
    from edgeq.rules.base import RuleHost

__all__ = ["BindingInfo", "RuleBook", "RuleSpec", "attach_stored", "build_bindings", "check_specs"]

log = logging.getLogger("edgeq.rules")

#: A binding as ``define_queue(rules=[...])`` takes it: a name, or (name, config).
RuleSpec = str | tuple[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class BindingInfo:
    """A queue's rule binding, as ``qm.queue_bindings("Q")`` reports it."""

    name: str
    config: dict[str, Any]
    persisted: bool
    error: str | None = None  # set when the plugin could not be loaded
    #: the rule object itself (a stand-in that raises, if its plugin could not be loaded)
    rule: QueueRule | None = field(default=None, compare=False, repr=False)


def check_specs(specs: object) -> list[tuple[str, dict[str, Any]]]:
    """Normalise ``rules=[...]`` to ``[(name, config), ...]`` with JSON-safe configs.

    >>> check_specs(["log", ("dead-letter", {"queue": "DLQ"})])
    [('log', {}), ('dead-letter', {'queue': 'DLQ'})]
    """
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence):
        raise InvalidType("rules must be a list of rule names or (name, config) pairs")
    out: list[tuple[str, dict[str, Any]]] = []
    for spec in specs:
        if isinstance(spec, str):
            name, config = spec, {}
        elif isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], str):
            name, config = spec[0], spec[1]
        else:
            raise InvalidType(f"a rule binding is a name or a (name, config) pair, not {spec!r}")
        if not isinstance(config, Mapping):
            raise RuleConfigError(f"rule {name!r}: config must be a dict, not {type(config).__name__}")
        try:
            config = json.loads(json.dumps(dict(config)))
        except (TypeError, ValueError) as exc:
            raise RuleConfigError(f"rule {name!r}: config must be JSON-serialisable ({exc})") from exc
        if not name:
            raise InvalidArgument("a rule name must not be empty")
        out.append((name, config))
    return out


def build_bindings(
    qm: RuleHost, queue: str, specs: Sequence[tuple[str, dict[str, Any]]]
) -> list[QueueRule]:
    """Load, configure and attach each rule; any error is raised before anything is stored."""
    from edgeq.rules.registry import build_rule

    rules = []
    for name, config in specs:
        rule = build_rule(name, config)
        try:
            rule.attach(qm, queue)
        except EdgeqError:
            raise
        except Exception as exc:
            raise RuleConfigError(f"rule {name!r} could not be bound to queue {queue!r}: {exc}") from exc
        rules.append(rule)
    return rules


class BrokenRule:
    """Stands in for a persisted rule whose plugin failed to load: every hook raises, so its events
    are retried and parked, never lost."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason

    def __getattr__(self, hook: str) -> Any:
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def fail(event: object) -> None:
            raise RuntimeError(f"rule {self.name!r} is not loaded: {self.reason}")

        return fail


def attach_stored(qm: RuleHost, rows: Sequence[BindingRow]) -> dict[str, list[Binding]]:
    """Re-attach persisted bindings at open; a broken plugin is logged and stood in for."""
    out: dict[str, list[Binding]] = {}
    for row in rows:
        key = f"b{row.id}"
        try:
            (rule,) = build_bindings(qm, row.queue, [(row.name, row.config)])
            binding = Binding(key, row.name, rule, persisted=True, config=row.config)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            log.error("rule %r bound to queue %s could not be loaded: %s", row.name, row.queue, reason)
            broken: Any = BrokenRule(row.name, reason)
            binding = Binding(key, row.name, broken, persisted=True, config=row.config, error=reason)
        out.setdefault(row.queue, []).append(binding)
    return out

class RuleBook:
    """A queue manager's rule API: in-process rules, bindings, failed deliveries, counters."""

    def __init__(self, qm_name: str, host: RuleHost, sink: EventSink) -> None:
        self.qm_name = qm_name
        self.host = host
        self.sink = sink
        self.clock = sink.clock

    def add_rule(self, queue: str, rule: QueueRule) -> None:
        """Attach a rule instance to a queue, for the life of this queue manager object."""
        from edgeq.rules import QueueRule

        check_name(queue, "queue name")
        if not isinstance(rule, QueueRule):
            raise InvalidType(f"rule must be an edgeq.rules.QueueRule instance, not {type(rule).__name__}")
        with self.sink.db.read() as conn:
            require_queue(Tx(conn), self.qm_name, queue)
        rule.attach(self.host, queue)
        self.sink.rules.add(queue, rule)

    def remove_rule(self, queue: str, rule: QueueRule) -> bool:
        """Detach a rule instance added with :meth:`add_rule`; return whether it was attached."""
        return self.sink.rules.remove(queue, rule)

    def queue_bindings(self, queue: str) -> list[BindingInfo]:
        """The rules bound to a queue, in the order they run (persisted ones first)."""
        check_name(queue, "queue name")
        with self.sink.db.read() as conn:
            require_queue(Tx(conn), self.qm_name, queue)
        return [
            BindingInfo(b.name, dict(b.config or {}), b.persisted, b.error, rule=b.rule)
            for b in self.sink.rules.of(queue)
        ]

    def rule_failures(self, *, parked: bool | None = None) -> list[FailureRow]:
        """Deliveries of durable events that raised: waiting for a retry, or parked."""
        with self.sink.db.read() as conn:
            return RuleTx(conn).failures(parked=parked)

    def retry_rule_failures(self, *, parked: bool = False, event_id: int | None = None) -> int:
        if event_id is not None:
            check_int(event_id, "event_id")
        if parked:
            with self.sink.write() as tx:
                RuleTx(tx.conn).rearm(self.clock(), event_id)
        return self.sink.rules.retry(force=True, event_id=event_id)

    def queue_stats(self, queue: str) -> dict[str, int]:
        check_name(queue, "queue name")
        with self.sink.db.read() as conn:
            require_queue(Tx(conn), self.qm_name, queue)
            return RuleTx(conn).stats(queue)

    def apply_stats_each(
        self, queue: str, batch: Sequence[tuple[Mapping[str, int], int | None]], *, durable: bool = True
    ) -> list[bool]:
        """Add ``(increments, event_id)`` pairs to a queue's counters in one write, once per durable
        event id; return whether each was applied."""
        check_name(queue, "queue name")
        if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
            raise InvalidType("apply_stats_each takes a list of (increments, event_id) pairs")
        for item in batch:
            _check_increment(item)
        with self.sink.write(durable=durable) as tx:
            return RuleTx(tx.conn).apply_stats(queue, batch)


def _check_increment(item: object) -> None:
    """Refuse what is not an ``(increments, event_id)`` pair of counter names to ints."""
    if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], Mapping):
        raise InvalidType(f"apply_stats_each takes (increments, event_id) pairs, not {item!r}")
    increments, event_id = item
    if event_id is not None:
        check_int(event_id, "an event id")
    for counter, n in increments.items():
        if not isinstance(counter, str) or isinstance(n, bool) or not isinstance(n, int):
            raise InvalidType(f"increments map counter names to ints, not {counter!r}: {n!r}")
