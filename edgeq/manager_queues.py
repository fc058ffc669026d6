"""The queue manager's queue verbs: define, alter, inspect and delete queues, and MQe's
expiry check points that act on a whole queue. Part of :class:`~edgeq.manager.QueueManager`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from edgeq.events.bindings import RuleSpec
from edgeq.gets import Gets
from edgeq.queues.attributes import QueueAttributes, QueueUsage, StoreUsage
from edgeq.queues.catalog import QueueCatalog
from edgeq.queues.checkpoints import ExpiryPolicy
from edgeq.types import DEFAULT_MAX_REDELIVERY_DELAY_MS, DEFAULT_REDELIVERY_DELAY_MS, OnFull, Ordering

__all__ = ["QueueVerbs"]


class QueueVerbs:
    """Queues of every kind and their expiry check points (a mixin of ``QueueManager``:
    it uses the parts the queue manager builds)."""

    _catalog: QueueCatalog
    _expiry: ExpiryPolicy
    _gets: Gets

    # -- queues ------------------------------------------------------------------------------
    def define_queue(
        self,
        name: str,
        *,
        expiry_ms: int | None = None,
        cap_expiry_ms: int | None = None,
        max_depth: int | None = None,
        max_message_bytes: int | None = None,
        default_priority: int = 4,
        ordering: Ordering = "priority",
        depth_threshold: int | None = None,
        rules: Sequence[RuleSpec] | None = None,
        encryption: str | None = None,
        max_bytes: int | None = None,
        on_full: OnFull = "reject",
        backout_threshold: int | None = None,
        backout_queue: str | None = None,
        redelivery_delay_ms: int = DEFAULT_REDELIVERY_DELAY_MS,
        max_redelivery_delay_ms: int = DEFAULT_MAX_REDELIVERY_DELAY_MS,
        exist_ok: bool = False,
    ) -> None:
        """Define a local queue; raise :class:`QueueExists` if it is defined already, unless
        ``exist_ok`` and it is defined exactly so (kind, attributes, rules): a script that
        defines its queues can run again. A queue defined otherwise is still refused.

        The flash budget: ``max_bytes`` bounds the data plus fields the queue holds
        (as stored), beside ``max_depth``; ``on_full`` is what a put does when either
        (or the queue manager's ``max_store_bytes``) would be exceeded: ``"reject"``
        raises :class:`QueueFull`; ``"discard-oldest"`` discards the oldest ready
        messages to make room, ``"discard-lowest-priority"`` the lowest-priority
        oldest ones (refusing a message lower than every one held). Expired messages
        go first; locked ones never; rules see each discard as ``removed`` with
        reason ``"overflow"`` (docs/storage.md, "Flash budget").

        ``encryption="aes-256-gcm"`` seals message data and fields in the store
        with the queue manager's store key (see :mod:`edgeq.crypto`); the default
        is the queue manager's ``default_encryption``.

        ``depth_threshold``: rules' ``on_threshold`` fires when a put takes the
        depth up to it. ``rules``: rules to bind by name, each a name or a
        ``(name, config)`` pair, e.g. ``[("dead-letter", {"queue": "DLQ"}), "log"]``;
        the bindings are stored and re-attached whenever the store is opened. Each
        rule validates its config now: on any error nothing is defined.

        Poison messages (IBM MQ's BOTHRESH/BOQNAME): a message whose assured gets were
        undone ``backout_threshold`` times is moved to ``backout_queue`` (defined
        already; encrypted if this queue is) in the undo's own transaction, keeping
        its uid, fields and deadline, instead of being delivered again; rules see it
        removed with reason ``"backout"``. Give both, or neither (docs/consumers.md,
        "Poison messages").

        Redelivery delay: a message whose assured get is undone with a backout (its
        consumer failed) is got again only ``redelivery_delay_ms`` later (1 s; 0: at
        once), doubling with each further backout up to ``max_redelivery_delay_ms``
        (5 minutes), and never after it expires; other messages are got meanwhile
        (docs/consumers.md, "Redelivery delay").

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo")
        >>> qm.queue_attributes("ALERTS").ordering
        'fifo'
        >>> qm.define_queue("ALERTS", expiry_ms=30_000, ordering="fifo", exist_ok=True)  # again: no error
        >>> qm.define_queue("ALERTS", expiry_ms=60_000, ordering="fifo", exist_ok=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        edgeq.errors.QueueExists: queue 'ALERTS' is already defined on DEV1, otherwise: expiry_ms 30000, not 60000; ...
        >>> qm.close()
        """
        self._catalog.define_queue(
            name, rules, encryption, exist_ok, expiry_ms=expiry_ms, cap_expiry_ms=cap_expiry_ms, max_depth=max_depth,
            max_message_bytes=max_message_bytes, default_priority=default_priority, ordering=ordering,
            depth_threshold=depth_threshold, max_bytes=max_bytes, on_full=on_full,
            backout_threshold=backout_threshold, backout_queue=backout_queue,
            redelivery_delay_ms=redelivery_delay_ms, max_redelivery_delay_ms=max_redelivery_delay_ms,
        )

    def define_remote_queue(
        self,
        name: str,
        *,
        target_qmgr: str,
        target_queue: str | None = None,
        mode: Literal["async", "sync"] = "async",
        expiry_ms: int | None = None,
        cap_expiry_ms: int | None = None,
        max_depth: int | None = None,
        max_message_bytes: int | None = None,
        default_priority: int = 4,
        rules: Sequence[RuleSpec] | None = None,
        encryption: str | None = None,
        depth_threshold: int | None = None,
        max_bytes: int | None = None,
        on_full: OnFull = "reject",
        refusal_limit: int | None = None,
        compression: str | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Define a remote queue: puts are kept here (durably, expiry running) and
        transmitted to ``target_queue`` (default: the same name) on queue manager
        ``target_qmgr`` by the sync agent. ``mode="async"`` stores and forwards
        later; ``mode="sync"`` transmits inside ``put`` and raises
        :class:`RemoteUnavailable` (keeping nothing) if that fails. Applications
        cannot get or browse a remote queue. A store never given a ``journal``
        setting journals its expiries from now on (``journal_mode == "device"``),
        for the sync agent to report. ``max_bytes`` and ``on_full`` bound what waits
        here as for :meth:`define_queue`; ``refusal_limit``: how many times the target
        may refuse a message before it moves to the dead-letter queue (rules see it
        removed, reason ``"refused"``; None: the sync agent's default).
        ``compression="zstd"`` (needs ``pip install 'edgeq[zstd]'``) or ``"zlib"``: the sync agent sends this queue's batches compressed as a whole,
        to a server that takes that codec (negotiated at hello; docs/protocol.md).
        ``exist_ok`` as for :meth:`define_queue`.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_remote_queue("ORDERS", target_qmgr="HOME", max_bytes=1 << 20, on_full="discard-oldest")
        >>> qm.queue_attributes("ORDERS").target_queue
        'ORDERS'
        >>> qm.close()
        """
        self._catalog.define_remote_queue(
            name, target_qmgr=target_qmgr, target_queue=target_queue, mode=mode, expiry_ms=expiry_ms,
            cap_expiry_ms=cap_expiry_ms, max_depth=max_depth, max_message_bytes=max_message_bytes,
            default_priority=default_priority, rules=rules, encryption=encryption, depth_threshold=depth_threshold,
            max_bytes=max_bytes, on_full=on_full, refusal_limit=refusal_limit, compression=compression,
            exist_ok=exist_ok,
        )

    def define_home_server_queue(self, name: str, *, server: str, exist_ok: bool = False, **attributes: Any) -> None:
        """Define a home-server queue: a local queue that the sync agent fills by pulling,
        from home server ``server``, the messages addressed to this queue manager's
        ``name`` (held there on the queue ``<this qm name>.<name>``). Other keywords
        are those of :meth:`define_queue`, and ``compression`` (``"zstd"``, ``"zlib"``):
        the agent asks the server for this queue's batches compressed. As with :meth:`define_remote_queue`, a
        store never given a ``journal`` setting journals its expiries from now on. ``exist_ok``
        as for :meth:`define_queue`.

        >>> import tempfile, os
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_home_server_queue("INBOX", server="HOME")
        >>> qm.queue_attributes("INBOX").server, qm.journal_mode
        ('HOME', 'device')
        >>> qm.close()
        """
        self._catalog.define_home_server_queue(name, server=server, exist_ok=exist_ok, **attributes)

    def alter_queue(self, name: str, **attributes: Any) -> QueueAttributes:
        """Change some of a queue's attributes (same keywords as :meth:`define_queue`).

        A new ``expiry_ms`` applies at once to messages already on the queue that
        have no expiry of their own; a new ``cap_expiry_ms`` only to new puts; a new
        ``ordering`` re-orders the messages there; ``rules=[...]`` replaces the
        persisted rule bindings; a lower ``max_depth`` or ``max_bytes`` takes effect at
        the next put (which makes room by ``on_full``, or is refused); ``refusal_limit``
        (remote queues only) and ``compression`` (remote and home-server queues; from the
        next request) as for :meth:`define_remote_queue`; ``backout_threshold``
        and ``backout_queue`` as for :meth:`define_queue` (set both to None to stop
        moving poison messages); ``redelivery_delay_ms`` and ``max_redelivery_delay_ms``
        from the next backout on. Returns the new attributes.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q")
        >>> qm.alter_queue("Q", max_depth=1000).max_depth
        1000
        >>> qm.close()
        """
        return self._catalog.alter_queue(name, **attributes)

    def queue_attributes(self, name: str) -> QueueAttributes:
        """The definition of a queue.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", max_depth=10); qm.queue_attributes("Q").max_depth
        10
        >>> qm.close()
        """
        return self._catalog.queue_attributes(name)

    def queue_usage(self, name: str) -> QueueUsage:
        """What a queue holds against its budget: depth, bytes (data plus fields, as
        stored), its limits and how many messages ``on_full`` discarded through this
        object. Expired messages are discarded first, as :meth:`depth` does.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q", max_bytes=100); _ = qm.put("Q", Message(b"12345"))
        >>> u = qm.queue_usage("Q"); (u.depth, u.bytes, u.max_bytes)
        (1, 5, 100)
        >>> qm.close()
        """
        return self._catalog.queue_usage(name)

    def store_usage(self) -> StoreUsage:
        """What the whole store holds, against :attr:`max_store_bytes`, with every queue's
        usage; read as stored (nothing is discarded), so monitoring may call it often."""
        return self._catalog.store_usage()

    def queue_names(self) -> list[str]:
        """The names of the queues defined here, sorted.

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("B"); qm.define_queue("A"); qm.queue_names()
        ['A', 'B']
        >>> qm.close()
        """
        return self._catalog.queue_names()

    def remote_queues(self) -> list[QueueAttributes]:
        """The remote queues defined here."""
        return self._catalog.queues_of_kind("remote")

    def home_server_queues(self) -> list[QueueAttributes]:
        """The home-server queues defined here."""
        return self._catalog.queues_of_kind("home")

    def delete_queue(self, name: str) -> None:
        """Delete an empty queue. Expired messages are purged first (MQe's "deleted"
        check point); any other message left raises :class:`QueueNotEmpty`. The
        backout queue of another queue is refused (:class:`InvalidArgument`) until
        that queue names another, or none."""
        self._catalog.delete_queue(name)

    # -- expiry check points -----------------------------------------------------------------
    def activate(self, name: str) -> int:
        """Activate a queue: discard every expired message on it, whatever its state.

        Happens by itself the first time a queue is used after the queue manager
        opens (MQe's "queue activated" check point). Returns how many it discarded.
        """
        return self._expiry.activate(name)

    def depth(self, name: str) -> int:
        """How many messages the queue holds, locked ones included; expired ones are
        purged first (MQe's "size inquired" check point), so none is ever counted.

        One indexed probe plus one row read: constant time at any depth.
        """
        return self._expiry.depth(name)

    def sweep_expired(self, name: str | None = None) -> int:
        """Discard expired messages now (IBM MQ's expiry scan); return how many.

        With no name, sweeps every queue. Rules see ``where="sweep"`` (or
        ``"activate"`` for a queue's first use since the queue manager opened).

        >>> import tempfile, os
        >>> from edgeq import Message, QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> qm.define_queue("Q"); qm.sweep_expired("Q")
        0
        >>> qm.close()
        """
        return self._expiry.sweep_expired(name)

    def start_expiry_sweeper(self, interval_s: float) -> None:
        """Sweep every queue ``interval_s`` seconds after the last sweep ended, in a background thread.

        Stopped by :meth:`stop_expiry_sweeper` or :meth:`close`.
        """
        self._expiry.start_sweeper(interval_s)

    def stop_expiry_sweeper(self) -> None:
        """Stop the background sweeper, waiting for a sweep in progress. No-op if none runs."""
        self._expiry.stop_sweeper()

    def purge(self, name: str) -> int:
        """Remove every message from a queue (rules see reason ``purged``); return how many."""
        return self._gets.purge(name)
