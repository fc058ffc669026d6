"""Persisted rule bindings: validating, storing and re-attaching a queue's rules."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgeq.dispatch import Binding
from edgeq.errors import EdgeqError, InvalidArgument, InvalidType, RuleConfigError
from edgeq.rulestore import BindingRow

if TYPE_CHECKING:
    from edgeq.manager import QueueManager
    from edgeq.rules import QueueRule

__all__ = ["BindingInfo", "RuleSpec", "attach_stored", "build_bindings", "check_specs"]

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
    qm: QueueManager, queue: str, specs: Sequence[tuple[str, dict[str, Any]]]
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
    """Stands in for a persisted rule whose plugin failed to load: every hook raises,
    so its events are retried and parked (visible in ``rule_failures``), never lost."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason

    def __getattr__(self, hook: str) -> Any:
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def fail(event: object) -> None:
            """Raise: the rule's plugin is not loaded."""
            raise RuntimeError(f"rule {self.name!r} is not loaded: {self.reason}")

        return fail


def attach_stored(qm: QueueManager, rows: Sequence[BindingRow]) -> dict[str, list[Binding]]:
    """Re-attach persisted bindings at open. A broken plugin is logged and stood in for;
    it never stops the queue manager or other queues."""
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
