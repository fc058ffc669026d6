"""The queue manager's verbs for its dead-letter queue (``edgeq.queues.deadletter``): which queue
it is, and the operator's browse, re-send and delete. Part of
:class:`~edgeq.manager.QueueManager`."""

from __future__ import annotations

from collections.abc import Sequence

from edgeq.errors import InvalidType
from edgeq.exchange.transmit import Transmitter
from edgeq.gets import Gets
from edgeq.message import Message
from edgeq.queues.deadletter import Resent
from edgeq.types import DLQ_QUEUE
from edgeq.uid import MessageUID

__all__ = ["DeadLetterVerbs"]


class DeadLetterVerbs:
    """The dead-letter queue's verbs (a mixin of ``QueueManager``: it uses the parts the
    queue manager builds).

    A remote queue's message refused ``refusal_limit`` times moves to the dead-letter
    queue with a ``dlq.*`` header (reason, queue, refusal, attempts, time); the operator
    fixes the cause, then re-sends it:

    >>> import tempfile, os
    >>> from edgeq import Message, QueueManager
    >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
    >>> qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=1)
    >>> uid = qm.put("METRICS", Message(b"x"))
    >>> [r.dead_lettered for r in qm.refused("METRICS", [(uid, "no-queue: HOME has no queue METRICS")])]
    [True]
    >>> (dead,) = qm.dlq_browse(); dead.fields["dlq.reason"], dead.fields["dlq.queue"]
    ('refused', 'METRICS')
    >>> qm.dlq_resend([uid]).moved == [uid], qm.depth("METRICS"), qm.dlq_browse()
    (True, 1, [])
    >>> qm.close()
    """

    _transmitter: Transmitter
    _gets: Gets

    def dead_letter_queue(self) -> str:
        """The store's dead-letter queue: ``SYSTEM.DEAD.LETTER.QUEUE`` (made when first
        needed) unless :meth:`set_dead_letter_queue` named another."""
        return self._transmitter.dead_letters.name()

    def set_dead_letter_queue(self, name: str | None) -> None:
        """Name the store's dead-letter queue (kept in the store; None: the default). A
        named queue is never made for you: until it is defined (and while it is full, or
        clear when a message is encrypted), messages that cannot be delivered stay where
        they are, logged, and are offered again."""
        self._transmitter.dead_letters.set_name(name)

    def dlq_browse(self, *, queue: str | None = None, limit: int | None = None) -> list[Message]:
        """The dead-letter queue's messages in get order (only those that left ``queue``,
        if given), with their ``dlq.*`` header; none while it is not defined. Expired ones
        are discarded first, as ``browse`` does."""
        name, defined = self._transmitter.dead_letters.current()
        wanted = None if queue is None else {DLQ_QUEUE: queue}
        return self._gets.browse(name, filter=wanted, limit=limit) if defined else []

    def dlq_resend(
        self, uids: Sequence[MessageUID | str] | None = None, *, queue: str | None = None
    ) -> Resent:
        """Move dead-lettered messages (``uids``, or all; only those that left ``queue``
        if given) back to the queue each left, their ``dlq.*`` fields removed, in one
        transaction: once the operator has fixed the cause (defined the target queue,
        made room). Those that cannot go back stay, listed in ``Resent.kept`` with why."""
        if uids is not None and (isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence)):
            raise InvalidType("uids must be a list of uids (or None for all)")
        return self._transmitter.dead_letters.resend(uids, queue)

    def dlq_delete(self, uids: Sequence[MessageUID | str] | None = None) -> int:
        """Delete dead-lettered messages (``uids``, each of which must be there; or all) in
        one transaction, for good: rules of the dead-letter queue see them removed, reason
        ``deleted``, and the journal records them ``discarded`` (a device reports that to
        its server, whose audit then stops counting them as waiting). Returns how many."""
        if uids is not None and (isinstance(uids, (str, MessageUID)) or not isinstance(uids, Sequence)):
            raise InvalidType("uids must be a list of uids (or None for all)")
        return self._transmitter.dead_letters.delete(uids)
