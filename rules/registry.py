"""Finding rules by name: the ``edgeq.rules`` entry-point group, or ``module:Class``.

Plugins load when a queue manager opens or a binding is made, never at import."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgeq.errors import InvalidArgument, RuleConfigError, RuleLoadError, RuleNotFound
from edgeq.rules.base import QueueRule

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["GROUP", "RuleInfo", "build_rule", "installed_rules", "load_rule_class"]

#: The entry-point group plugins register their rule classes under.
GROUP = "edgeq.rules"


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """An installed rule: its name, the distribution that provides it, and what it does."""

    name: str
    package: str
    summary: str
    target: str


def _summary(obj: object) -> str:
    doc = (inspect.getdoc(obj) or "").replace("``", "")  # reST literals read badly in a table
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _entry_points() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points  # only when a rule is looked up by name: it is slow

    return {ep.name: ep for ep in entry_points(group=GROUP)}


def installed_rules() -> list[RuleInfo]:
    """Every rule registered in the ``edgeq.rules`` group, sorted by name (loads each).

    >>> "dead-letter" in [r.name for r in installed_rules()]
    True
    """
    out = []
    for name, ep in sorted(_entry_points().items()):
        package = ep.dist.name if ep.dist is not None else "?"
        try:
            summary = _summary(ep.load())
        except Exception as exc:  # a broken plugin is listed, not fatal
            summary = f"BROKEN: {type(exc).__name__}: {exc}"
        out.append(RuleInfo(name, package, summary, ep.value))
    return out


def _check_class(obj: object, name: str) -> type[QueueRule]:
    if not (inspect.isclass(obj) and issubclass(obj, QueueRule)):
        raise RuleLoadError(
            f"rule {name!r} resolves to {obj!r}, which is not a subclass of edgeq.rules.QueueRule"
        )
    return obj


def load_rule_class(name: str) -> type[QueueRule]:
    """The rule class registered as ``name``, or at dotted path ``package.module:Class``.

    >>> load_rule_class("log").__name__
    'LogRule'
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"a rule name must be a non-empty str, not {name!r}")
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
            obj = getattr(module, attr)
        except Exception as exc:
            raise RuleLoadError(f"rule {name!r} could not be loaded: {type(exc).__name__}: {exc}") from exc
        return _check_class(obj, name)
    ep = _entry_points().get(name)
    if ep is None:
        known = ", ".join(sorted(_entry_points())) or "none"
        raise RuleNotFound(
            f"no rule named {name!r} is installed (installed: {known}); install its package, "
            "or give a dotted path 'package.module:Class'"
        )
    try:
        obj = ep.load()
    except Exception as exc:
        raise RuleLoadError(
            f"rule {name!r} (from {ep.value}) failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    return _check_class(obj, name)


def build_rule(name: str, config: Mapping[str, Any]) -> QueueRule:
    """Load rule ``name`` and build it from ``config``, or raise a clear ``RuleError``."""
    if not isinstance(config, Mapping):
        raise RuleConfigError(
            f"rule {name!r}: config must be a JSON object (a dict), not {type(config).__name__}"
        )
    cls = load_rule_class(name)
    try:
        rule = cls.from_config(dict(config))
    except RuleConfigError:
        raise
    except (InvalidArgument, TypeError, ValueError, KeyError) as exc:
        raise RuleConfigError(f"rule {name!r} refused its config {dict(config)!r}: {exc}") from exc
    if not isinstance(rule, QueueRule):
        raise RuleLoadError(f"rule {name!r}: from_config returned {rule!r}, not a QueueRule")
    return rule
