"""The queue side of an out-bridge: batches of assured gets under the bridge's confirm id, confirmed in one
transaction once the foreign system has them, else put back (or, if it never will take one, moved to the
dead-letter queue); messages too close to expiry kept locked until they expire."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgeq.errors import ConfirmIdNotFound
from edgeq.message import Message
from edgeq.sync.bridges.errors import BridgeConfigError

if TYPE_CHECKING:
    from edgeq.sync.bridges.base import Bridge
    from edgeq.uid import MessageUID

__all__ = ["BATCH", "MAX_BATCH", "Got", "Outbox", "check_batch"]

#: ``batch``: the messages an out-bridge gets, publishes and confirms together (its default, its most).
BATCH, MAX_BATCH = 256, 10_000


def check_batch(config: Mapping[str, Any]) -> None:
    """Refuse a ``batch`` setting that is not an int from 1 to :data:`MAX_BATCH`."""
    n = config["batch"]
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH:
        raise BridgeConfigError(f"batch (the messages got, published and confirmed together) must be an int "
                                f"from 1 to {MAX_BATCH}, not {n!r}")


@dataclass(frozen=True, slots=True)
class Got:
    """A message got, ``before_ms`` read no later than the get and ``after_ms`` just after it."""

    message: Message
    uid: MessageUID
    before_ms: int
    after_ms: int


class Outbox:
    """The bridge's queue, consumed through the public API (assured gets), so expiry and rules apply."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge, self.qm, self.queue = bridge, bridge.qm, bridge.definition.queue
        self.confirm_id = bridge.definition.confirm_id
        self.batch = int(bridge.definition.config.get("batch", BATCH))
        #: When the messages too close to expiry to send, left locked, will have expired (its clock).
        self._expiring: list[int] = []

    def undo_locked(self) -> int:
        """Put back what a run that crashed had got but not confirmed (sent again, same uid); how many."""
        try:
            return self.qm.undo(self.queue, self.confirm_id, count_backout=False)
        except ConfirmIdNotFound:
            return 0

    def get(self, wait_s: float) -> list[Got]:
        """Up to ``batch`` messages in one transaction, waiting up to ``wait_s`` for the first; the expired
        ones held locked are discarded first."""
        before = self.qm.now_ms()  # no later than the get: a deadline computed from it is never extended
        if self._expiring and self._expiring[0] <= before:
            self.qm.activate(self.queue)  # discards the expired ones left locked, telling the queue's rules
            self._expiring = [t for t in self._expiring if t > before]
        messages = self.qm.get_many(self.queue, self.batch, confirm_id=self.confirm_id, wait=wait_s)
        after = self.qm.now_ms()
        return [Got(m, m.uid, before, after) for m in messages if m.uid is not None]

    def hold(self, got: Got) -> None:
        """Keep a message too close to expiry to send locked, never sent, discarded once expired."""
        self.bridge.board.count("skipped")
        left = got.message.remaining_expiry_ms or 0
        self._expiring = sorted([*self._expiring, got.after_ms + left])

    def confirm(self, uids: Sequence[MessageUID]) -> None:
        """Confirm the gets of ``uids`` (the foreign system has them) in one transaction."""
        if not uids:
            return
        results = self.qm.confirm_get_each(self.queue, uids)
        lost = [str(r.uid) for r in results if r.status == "unknown"]
        self.bridge.board.count("forwarded", len(results) - len(lost))  # "expired": delivered, then due
        if lost:
            self.bridge.board.error(f"{len(lost)} message(s) delivered were no longer locked on queue "
                                    f"{self.queue} when confirmed (first {lost[0]})")

    def put_back(self, uids: Sequence[MessageUID], why: str, *, count_backout: bool = False) -> None:
        """Undo the gets of ``uids`` (reported with ``why``); ``count_backout`` when the messages are at
        fault."""
        if not uids:
            return
        which = f"message {uids[0]}" if len(uids) == 1 else f"{len(uids)} messages (first {uids[0]}) each"
        self.bridge.board.error(f"{which} {why}: put back on queue {self.queue}")
        with contextlib.suppress(ConfirmIdNotFound):  # they expired meanwhile: their rules were told
            self.qm.undo(self.queue, self.confirm_id, count_backout=count_backout, uids=uids)

    def give_up(self, refusals: Sequence[tuple[MessageUID, str]]) -> None:
        """Move messages the foreign system will never take (each ``(uid, why)``) to the dead-letter queue;
        one that cannot go there is put back, a backout counted."""
        if not refusals:
            return
        dlq = self.qm.dead_letter_queue()
        try:
            stayed = dict(self.qm.dlq_give_up(self.queue, self.confirm_id, refusals))
        except ConfirmIdNotFound:  # they expired meanwhile: their rules were told
            return
        for uid, why in refusals:
            if uid in stayed:
                self.bridge.board.error(f"message {uid} {why}, and did not go to the dead-letter queue "
                                        f"{dlq}: {stayed[uid]}")
            else:
                self.bridge.board.count("refused")
                self.bridge.board.error(f"message {uid} {why}: moved to the dead-letter queue {dlq}")
