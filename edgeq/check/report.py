"""What ``edgeq check`` found in a store, and what its repair did: typed, and as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

__all__ = ["CheckReport", "CounterDrift", "DamagedMessage", "DamagedRecord", "Fix", "Repairs"]

#: What a repair does with a damaged message row: quarantine it, give it back its ``rank`` (the one
#: damage that loses nothing), or leave it (see ``what``).
Fix = Literal["quarantine", "rerank", "leave"]


@dataclass(frozen=True, slots=True)
class DamagedMessage:
    """A message row that is not what was written: ``what`` says how."""

    id: int  #: the row's id in ``messages``
    queue: str | None  #: its queue's name (None: it belongs to no queue)
    uid: str  #: origin.stamp as stored (damaged text shown with replacement characters)
    what: str
    fix: Fix = "quarantine"


@dataclass(frozen=True, slots=True)
class CounterDrift:
    """A queue whose ``depth`` or ``bytes`` counter disagrees with the rows it holds."""

    queue: str
    depth: int  #: the counter
    rows: int  #: the rows counted
    bytes: int  #: the counter
    row_bytes: int  #: data plus fields of the rows counted


@dataclass(frozen=True, slots=True)
class DamagedRecord:
    """A row of another table (rule binding or event, journal, queue, key check) that cannot be read."""

    table: str
    id: int  #: its rowid
    queue: str | None
    what: str


@dataclass(frozen=True, slots=True)
class Repairs:
    """What a repair did, a line each; ``left``: what it could not repair, and what to do."""

    quarantined: tuple[str, ...] = ()
    reranked: tuple[str, ...] = ()
    rebuilt: tuple[str, ...] = ()  #: indexes rebuilt
    recounted: tuple[str, ...] = ()
    identity: tuple[str, ...] = ()
    left: tuple[str, ...] = ()

    def __add__(self, other: Repairs) -> Repairs:
        """Both repairs' lines (the command line repairs before and after opening)."""
        return Repairs(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))

    @property
    def done(self) -> bool:
        return any(_fields(self)[:-1])


def _fields(r: Repairs) -> tuple[tuple[str, ...], ...]:
    return (r.quarantined, r.reranked, r.rebuilt, r.recounted, r.identity, r.left)


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Everything ``edgeq check`` found in one store.

    >>> CheckReport("dev.db", checked=3).clean
    True
    >>> report = CheckReport("dev.db", counters=(CounterDrift("Q", 5, 4, 100, 80),))
    >>> report.clean, report.to_json()["counters"]
    (False, ({'queue': 'Q', 'depth': 5, 'rows': 4, 'bytes': 100, 'row_bytes': 80},))
    """

    path: str
    checked: int = 0  #: message rows read
    seconds: float = 0.0
    #: ``PRAGMA integrity_check``'s complaints (empty: it said "ok")
    sqlite: tuple[str, ...] = ()
    #: what SQLite could not read at all (the file, or a table past some row)
    unreadable: tuple[str, ...] = ()
    messages: tuple[DamagedMessage, ...] = ()
    counters: tuple[CounterDrift, ...] = ()
    records: tuple[DamagedRecord, ...] = ()
    #: the store's identity: queue manager name, incarnation, stamp clock
    identity: tuple[str, ...] = ()
    #: what a repair did (None: no repair was asked for, or there was nothing to repair)
    repairs: Repairs | None = field(default=None)

    @property
    def clean(self) -> bool:
        return not (
            self.sqlite or self.unreadable or self.messages or self.counters or self.records
            or self.identity
        )

    def joined(self, later: CheckReport) -> CheckReport:
        """This report's findings followed by ``later``'s."""
        repairs = self.repairs if later.repairs is None else (
            later.repairs if self.repairs is None else self.repairs + later.repairs
        )
        return replace(
            later, seconds=self.seconds + later.seconds, sqlite=self.sqlite + later.sqlite,
            unreadable=self.unreadable + later.unreadable, messages=self.messages + later.messages,
            counters=self.counters + later.counters, records=self.records + later.records,
            identity=self.identity + later.identity, repairs=repairs,
        )

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready values (``edgeq check --json``)."""
        out = asdict(self)
        out["clean"] = self.clean
        return out
