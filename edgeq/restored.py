"""A device store found restored from an older copy (a backup, an SD-card image, a VM
snapshot): behind what its home server has seen of its origin.

The sync agent asks at every hello (:meth:`~edgeq.exchange.Exchange.check_restored`): the server
answers its settled mark for the store's origin (no uid below it will ever be taken
again) and the highest stamp of that origin it has seen. A store that holds a message
below that mark, or has never issued that stamp, lived on elsewhere after the copy was
taken. It then takes a new incarnation, in one transaction with a record of what was
found, so that nothing it makes from then on can collide with what its old life sent
(docs/protocol.md, "A store restored from a backup").
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from edgeq.args import check_stamp
from edgeq.events import EventSink
from edgeq.meta import renew_incarnation
from edgeq.names import check_name, check_origin
from edgeq.store import Tx
from edgeq.syncstore import SyncTx

__all__ = ["Restoration", "check_restored", "last_restoration", "origin_seen", "settled_marks"]

_KEY = "restored"  # edgeq_meta: the latest Restoration, as JSON


@dataclass(frozen=True, slots=True)
class Restoration:
    """What was found and done when the store was found restored (times: store clock, ms)."""

    at_ms: int
    server: str  #: the home server that had seen more of the store than it holds
    old_origin: str  #: the origin the restored copy had (its held messages keep it)
    new_origin: str  #: the incarnation taken: every uid issued from now on carries it
    resent_below: int | None  #: the server's settled mark: held uids of the old origin below it are resends
    seen: int | None  #: the highest stamp of the old origin the server had seen
    resends: int  #: messages held here below that mark: the server answers them as delivered

    def as_dict(self) -> dict[str, Any]:
        """For JSON."""
        return asdict(self)


def check_restored(
    sink: EventSink, name: str, origin: str, server: str, *, settled: int | None, seen: int | None
) -> Restoration | None:
    """Compare the store with what ``server`` has seen of ``origin``; if it is behind,
    draw a new incarnation (stamps raised above ``seen``) and keep the record, in one
    transaction. None: the store is not behind."""
    check_name(server, "server")
    settled = None if settled is None else check_stamp(settled, "settled")
    seen = None if seen is None else check_stamp(seen, "seen")
    with sink.db.read() as conn:  # a hello of a store that is not behind writes nothing
        if not _behind(Tx(conn), origin, settled, seen):
            return None
    with sink.write() as tx:
        if not _behind(tx, origin, settled, seen):
            return None  # checked again where it is written: it may have changed since the read
        above = max(seen or 0, (settled or 1) - 1)  # processes still on the old incarnation stamp above it
        done = Restoration(sink.clock(), server, origin, renew_incarnation(tx.conn, name, above),
                           settled, seen, 0 if settled is None else tx.held_below(origin, settled))
        SyncTx(tx.conn).set_meta({_KEY: json.dumps(done.as_dict(), separators=(",", ":"))})
    return done


def _behind(tx: Tx, origin: str, settled: int | None, seen: int | None) -> bool:
    """Whether the store holds a message of ``origin`` below the server's mark, or the
    server has seen a stamp of it that this store never issued."""
    return (settled is not None and settled > tx.transmission_low_water(origin)) or (
        seen is not None and seen > tx.last_stamp())


def origin_seen(sink: EventSink, origin: str) -> tuple[int | None, int | None]:
    """A receiver's view of a sender's store ``origin``: its settled mark and the highest
    stamp of it held or remembered here (None: none)."""
    check_origin(origin, "origin")
    with sink.db.read() as conn:
        tx = Tx(conn)
        return tx.settled_marks([origin]).get(origin), tx.highest_seen(origin)


def settled_marks(sink: EventSink, origins: Collection[str]) -> dict[str, int]:
    """The settled mark of each of ``origins`` that has one: below it, a uid of that origin
    was settled by its sender and is never taken again."""
    checked = {check_origin(o, "origin") for o in origins}
    with sink.db.read() as conn:
        return Tx(conn).settled_marks(checked)


def last_restoration(sink: EventSink) -> Restoration | None:
    """The latest time the store was found restored (None: never)."""
    with sink.db.read() as conn:
        raw = SyncTx(conn).meta_items(_KEY).get(_KEY)
    if raw is None:
        return None
    try:
        return Restoration(**json.loads(raw))
    except (TypeError, ValueError):
        return None  # written by another edgeq: nothing to show rather than a wrong record
