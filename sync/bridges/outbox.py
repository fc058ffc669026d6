"""The queue side of an out-bridge: assured gets under the bridge's confirm id, confirmed once the foreign
system has the message, else put back; messages too close to expiry kept locked until they expire."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeq.errors import ConfirmIdNotFound
from edgeq.message import Message

if TYPE_CHECKING:
    from edgeq.sync.bridges.base import Bridge
    from edgeq.uid import MessageUID

__all__ = ["Got", "Outbox"]


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
        #: When the messages too close to expiry to send, left locked, will have expired (its clock).
        self._expiring: list[int] = []

    def undo_locked(self) -> int:
        """Put back what a run that crashed had got but not confirmed (sent again, same uid); how many."""
        try:
            return self.qm.undo(self.queue, self.confirm_id, count_backout=False)
        except ConfirmIdNotFound:
            return 0

    def get(self, wait_s: float) -> Got | None:
        """The next message, waiting up to ``wait_s``; the expired ones held locked are discarded first."""
        before = self.qm.now_ms()  # no later than the get: a deadline computed from it is never extended
        if self._expiring and self._expiring[0] <= before:
            self.qm.activate(self.queue)  # discards the expired ones left locked, telling the queue's rules
            self._expiring = [t for t in self._expiring if t > before]
        message = self.qm.get(self.queue, confirm_id=self.confirm_id, wait=wait_s)
        if message is None or message.uid is None:
            return None
        return Got(message, message.uid, before, self.qm.now_ms())

    def hold(self, got: Got) -> None:
        """Keep a message too close to expiry to send locked, never sent, discarded once expired."""
        self.bridge.board.count("skipped")
        left = got.message.remaining_expiry_ms or 0
        self._expiring = sorted([*self._expiring, got.after_ms + left])

    def confirm(self, uid: MessageUID) -> None:
        self.qm.confirm_get(self.queue, uid)
        self.bridge.board.count("forwarded")

    def put_back(self, uid: MessageUID, why: str, *, count_backout: bool = False) -> None:
        """Undo the get of ``uid`` (reported with ``why``); ``count_backout`` when the message is at fault."""
        self.bridge.board.error(f"message {uid} {why}: put back on queue {self.queue}")
        with contextlib.suppress(ConfirmIdNotFound):  # it expired meanwhile: its rules were told
            self.qm.undo(self.queue, self.confirm_id, count_backout=count_backout, uids=[uid])
