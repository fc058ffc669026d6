"""The queue manager's consumer verbs: :meth:`~ConsumerVerbs.consume` (a loop over a
queue's messages) and :meth:`~ConsumerVerbs.listen` (threads calling back with each).
Part of :class:`~edgeq.manager.QueueManager`; the waiting itself is :mod:`edgeq.consume.waiting`,
the loops :mod:`edgeq.consume.consumers` (docs/consumers.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta

from edgeq.consume.consumers import Consumer, Listener, check_readable
from edgeq.consume.waiting import Waker, check_wait
from edgeq.errors import InvalidArgument, InvalidType
from edgeq.gets import Gets
from edgeq.message import Message, check_fields
from edgeq.names import check_name
from edgeq.types import FieldValue, Filter

__all__ = ["ConsumerVerbs"]


class ConsumerVerbs:
    """Consumer loops and listeners (a mixin of ``QueueManager``: it uses the parts the
    queue manager builds)."""

    _gets: Gets
    _waker: Waker

    def consume(
        self, queue: str, *, wait: float | timedelta | None = None, confirm: bool = True,
        filter: Filter | None = None,
    ) -> Consumer:
        """The messages of ``queue``, one at a time, for a ``for`` loop: each waits for
        the next message (as ``get(wait=...)`` does) and the loop ends when ``wait``
        passes with nothing new (None, the default: never; 0: as soon as the queue is
        empty) or when the queue manager closes.

        With ``confirm=True`` (the default) each message is got assured and confirmed
        when the loop body finishes with it (when the next one is asked for). Used as a
        context manager, an exception leaving the block undoes the message in hand
        (``backout_count`` + 1; got again after the queue's redelivery delay) and
        ``break`` confirms it. A bare
        ``for`` loop cannot tell ``break`` from an exception, so leaving one early
        undoes the message in hand: it is never lost, and may come again.
        ``confirm=False`` takes each message for good when it is handed out.
        ``filter`` takes only messages whose fields equal every given value.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> _ = qm.put_many("Q", [Message(b"a"), Message(b"b")])
        >>> with qm.consume("Q", wait=0) as messages:
        ...     [m.data for m in messages]
        [b'a', b'b']
        >>> qm.depth("Q")
        0
        >>> qm.close()
        """
        check_name(queue, "queue name")
        seconds = check_wait(wait)
        wanted = _checked(confirm, filter)
        return Consumer(self._gets, self._waker, queue, wait=math.inf if seconds is None else seconds,
                        confirm=confirm, wanted=wanted)

    def listen(
        self, queue: str, callback: Callable[[Message], object], *, threads: int = 1, confirm: bool = True,
        filter: Filter | None = None,
    ) -> Listener:
        """Call ``callback`` with every message of ``queue``, from ``threads`` threads,
        until the returned :class:`~edgeq.consume.consumers.Listener` is stopped (``stop()``,
        or leaving it as a context manager) or the queue manager closes.

        With ``confirm=True`` (the default) each message is got assured: the
        callback returning confirms it; the callback raising undoes it
        (``backout_count`` + 1, so a queue's backout threshold applies; got again after
        the queue's redelivery delay, the messages behind it meanwhile) and is logged
        in one line (its traceback at most once a minute per message), and the
        listener carries on. An error of the store itself (a damaged row, the
        queue deleted) stops the listener and is kept in its ``error``.
        ``confirm=False`` takes each message for good before the callback runs.

        >>> import tempfile, os, threading
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); seen = threading.Event()
        >>> with qm.listen("Q", lambda m: seen.set()) as listener:
        ...     _ = qm.put("Q", Message(b"ping"))
        ...     seen.wait(5)
        True
        >>> listener.delivered, qm.depth("Q")
        (1, 0)
        >>> qm.close()
        """
        check_name(queue, "queue name")
        if not callable(callback):
            raise InvalidType(f"listen takes a callable, called with each message, not {type(callback).__name__}")
        if isinstance(threads, bool) or not isinstance(threads, int):
            raise InvalidType(f"threads must be a positive int, not {threads!r}")
        if threads < 1:
            raise InvalidArgument(f"threads must be a positive int, not {threads}")
        wanted = _checked(confirm, filter)
        check_readable(self._gets, queue)
        return Listener(self._gets, self._waker, queue, callback, threads=threads, confirm=confirm, wanted=wanted)


def _checked(confirm: object, filter: Filter | None) -> dict[str, FieldValue] | None:
    """The arguments both verbs share, checked before anything starts."""
    if not isinstance(confirm, bool):
        raise InvalidType(f"confirm must be True or False, not {confirm!r}")
    return check_fields(filter) if filter is not None else None
