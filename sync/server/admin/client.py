"""The operator's side of remote administration, on the home server's store.

    client = AdminClient("home.db", operator_key="operator.key")
    handle = client.request("DEV1", "inquire-queue", "ORDERS")   # signed, recorded, queued
    reply = handle.wait(30)          # the device's AdminReply once its agent pushed it (None: not yet)
    handles = client.request_all("inquire-all")                  # every known device, not revoked
    client.pending(); client.replies()                           # what is outstanding, what came back

The transport is ordinary sync (``docs/admin.md``, "Transport"). A request for device
``DEV`` is recorded in the home store's ``admin_requests`` table, then put on the
server's queue ``DEV.SYSTEM.ADMIN``, which the device pulls into its home-server queue
``SYSTEM.ADMIN`` (:data:`~edgeq.admin.wire.ADMIN_QUEUE`); the device executes it and its
agent pushes the reply to the server's local queue ``SYSTEM.ADMIN.REPLY``. Whoever looks
(:meth:`AdminClient.collect`, done by every listing and wait) moves the replies from
that queue into ``admin_requests`` exactly once: an assured get, the record (a request's
answer is recorded once: :meth:`~edgeq.sync.server.admin.records.AdminRecords.reply`), then the
confirm, so a crash in between only makes the next look record nothing new. A reply is recorded only for a request that was sent to
the device that replies, and only if that device pushed it (the reply message's uid
names its sender, and an authenticating server takes only a device's own uids).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq.admin.wire import ADMIN_QUEUE, ADMIN_REPLY_QUEUE, AdminReply, AdminRequest, request_message
from edgeq.args import check_seconds
from edgeq.errors import AdminError, DeviceNotFound, EdgeqError, InvalidArgument, QueueExists
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.sync.keys import KeyPair, load_private_key, new_key_pair, public_bytes
from edgeq.sync.protocol import device_queue_name
from edgeq.sync.server.admin.records import AdminRecord, AdminRecords, RequestStatus
from edgeq.types import MAX_CONFIRM_ID, Clock

__all__ = [
    "AdminClient",
    "AdminHandle",
    "CollectReport",
    "OperatorKey",
    "new_operator_key",
    "operator_key_id",
]

log = logging.getLogger("edgeq.sync.admin")

#: How often a wait looks at the reply queue again (seconds).
DEFAULT_POLL_S = 0.1


def operator_key_id(public_key: bytes) -> str:
    """The id devices know an operator key by: 16 hex digits of the SHA-256 of its raw
    32-byte public key (what ``edgeq admin keygen`` prints, and ``edgeq keys trust-admin`` takes).

    >>> operator_key_id(bytes(32))
    '66687aadf862bd77'
    """
    return hashlib.sha256(public_key).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class OperatorKey:
    """An operator's signing key and the id devices know it by."""

    private_key: Ed25519PrivateKey
    key_id: str

    @classmethod
    def load(cls, path: Path, key_id: str | None = None) -> OperatorKey:
        """The key in ``path`` (a PEM file of ``edgeq admin keygen``, mode 0600); its id is
        :func:`operator_key_id` unless ``key_id`` names another."""
        key = load_private_key(path, "operator key")
        return cls(key, key_id or operator_key_id(public_bytes(key)))


def new_operator_key(path: Path, *, overwrite: bool = False) -> tuple[KeyPair, str]:
    """Make an operator key pair (the private key at ``path``, 0600; the public one beside
    it, ``.pub``) and return the files and the key's id. Refuses to overwrite unless told to."""
    pair = new_key_pair(path, overwrite=overwrite)
    return pair, operator_key_id(pair.public_key)


@dataclass(slots=True)
class CollectReport:
    """What one :meth:`AdminClient.collect` did with the replies waiting on the reply queue."""

    recorded: int = 0  #: replies recorded for their requests
    repeated: int = 0  #: a reply to a request already answered (the first one stands)
    #: ``(message uid, why)`` of replies dropped: malformed, or not the sender's to give
    refused: list[tuple[str, str]] = field(default_factory=list)


class AdminClient:
    """Send signed admin requests to devices through the home store, and read their replies.

    ``home``: the home server's :class:`~edgeq.QueueManager` (shared with a running
    server is fine), or the path of its store (opened here, closed by :meth:`close`).
    ``operator_key``: the operator's Ed25519 key, or the path of its file (needed to send,
    not to read); ``key_id`` the id the devices trust it under (default
    :func:`operator_key_id`). ``clock``: epoch ms (default the queue manager's), for the
    requests' times and for telling which have expired; ``poll_s``: how often a wait looks
    for replies.

    >>> import tempfile, os
    >>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    >>> from edgeq import QueueManager
    >>> home = QueueManager(os.path.join(tempfile.mkdtemp(), "home.db"), name="HOME")
    >>> home.register_device("DEV1", bytes(32))
    >>> client = AdminClient(home, operator_key=Ed25519PrivateKey.generate())
    >>> handle = client.request("DEV1", "inquire-queue", "ORDERS")
    >>> handle.status, home.depth("DEV1.SYSTEM.ADMIN")
    ('pending', 1)
    >>> client.close(); home.close()
    """

    def __init__(
        self, home: QueueManager | str | Path, *, operator_key: Ed25519PrivateKey | OperatorKey | Path | str | None = None,
        key_id: str | None = None, clock: Clock | None = None, poll_s: float = DEFAULT_POLL_S,
    ) -> None:
        check_seconds(poll_s, "poll_s")
        self._own = not isinstance(home, QueueManager)
        self.qm = QueueManager(home) if not isinstance(home, QueueManager) else home
        try:
            self.key = _operator_key(operator_key, key_id)
            self.clock: Clock = clock or self.qm.now_ms
            self.poll_s = poll_s
            self.records = AdminRecords(str(self.qm.path), timeout=30.0)
            self._ensure_queue(ADMIN_REPLY_QUEUE)
        except BaseException:
            if self._own:
                self.qm.close()
            raise

    def close(self) -> None:
        """Close the record's connections (and the store, if this client opened it)."""
        self.records.close()
        if self._own:
            self.qm.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- sending ---------------------------------------------------------------------------

    def devices(self) -> list[str]:
        """The devices a fan-out reaches: every device this server knows (it said hello or
        was registered) and has not revoked, by name."""
        return [d.name for d in self.qm.devices() if d.revoked_ms is None]

    def request(
        self, device: str, action: str, target: str | None = None, params: Mapping[str, object] | None = None,
        *, expires_ms: int | None = None,
    ) -> AdminHandle:
        """Sign a request for ``device``, record it, and queue it for the device's next pull.

        ``action`` is one of :data:`~edgeq.admin.wire.ACTIONS`; ``target`` the queue it acts on;
        ``params`` the action's parameters (``docs/admin.md``). ``expires_ms`` (epoch ms, this
        client's clock): if the device has not taken it by then, it is never executed (its
        message expires like any other, and :attr:`AdminHandle.status` says ``expired``); the
        device gets the lifetime left, never this instant (``docs/protocol.md``)."""
        key = self._signing_key()
        record = self.qm.device(device)
        if record is None:
            raise DeviceNotFound(
                f"no device {device!r} is known here: it has never said hello to this server and is not "
                f"registered (edgeq server devices add {device})"
            )
        if record.revoked_ms is not None:
            raise InvalidArgument(f"device {device} is revoked (since {record.revoked_at}): it can no longer sync")
        now = self.clock()
        if expires_ms is not None and expires_ms <= now:
            raise InvalidArgument(f"expires_ms {expires_ms} is not in the future (now {now}): give a later time")
        held = device_queue_name(device, ADMIN_QUEUE)
        request = AdminRequest.create(
            action, target, params, device=device, reply_qmgr=self.qm.name, created_ms=now, key_id=key.key_id,
            expires_ms=expires_ms,
        ).sign(key.private_key)
        message = request_message(request)
        self._ensure_queue(held)
        # Recorded first: a reply can only ever be for a request the server knows.
        self.records.add(request, message.data)
        self.qm.put(held, message)
        log.info("admin request %s to %s: %s %s", request.request_id, device, action, target or "",
                 extra={"event": "admin-request", "request_id": request.request_id, "device": device,
                        "action": action, "target": target, "expires_ms": expires_ms})
        return AdminHandle(self, request.request_id, device)

    def request_all(
        self, action: str, target: str | None = None, params: Mapping[str, object] | None = None,
        *, expires_ms: int | None = None,
    ) -> list[AdminHandle]:
        """:meth:`request` to every device of :meth:`devices`, one request each."""
        devices = self.devices()
        if not devices:
            raise DeviceNotFound("this server knows no device (none said hello, none is registered): "
                                 "nothing to send to")
        return [self.request(d, action, target, params, expires_ms=expires_ms) for d in devices]

    def resend(self, request_id: str) -> AdminHandle:
        """Put the same signed request on its device's admin queue again (a request that
        was lost, say with a device's store): a device that executed it already answers
        from its remembered reply, never executing it twice."""
        record = self._record(request_id)
        held = device_queue_name(record.device, ADMIN_QUEUE)
        self._ensure_queue(held)
        self.qm.put(held, request_message(AdminRequest.from_bytes(record.request)))
        return AdminHandle(self, record.request_id, record.device)

    def handle(self, request_id: str) -> AdminHandle:
        """The handle of a request sent earlier (e.g. by another process)."""
        record = self._record(request_id)
        return AdminHandle(self, record.request_id, record.device)

    # -- replies ---------------------------------------------------------------------------

    def collect(self, limit: int = 500) -> CollectReport:
        """Move the replies waiting on ``SYSTEM.ADMIN.REPLY`` into ``admin_requests`` (at most
        ``limit``): assured get, record, confirm. A reply that does not decode, or whose
        sender is not the device its request went to, is dropped with a warning."""
        report = CollectReport()
        # Whatever a collector that died left locked is offered again: recording is idempotent.
        self.qm.release_locks(ADMIN_REPLY_QUEUE)
        got = self.qm.get_many(ADMIN_REPLY_QUEUE, limit, confirm_id=secrets.randbelow(MAX_CONFIRM_ID) + 1)
        for message in got:
            why = self._take(message, report)
            if why is not None:
                report.refused.append((str(message.uid), why))
                log.warning("admin reply %s dropped: %s", message.uid, why,
                            extra={"event": "admin-reply-refused", "uid": str(message.uid), "why": why})
        if got:
            self.qm.confirm_get_each(ADMIN_REPLY_QUEUE, [m.uid for m in got if m.uid is not None])
        return report

    def _take(self, message: Message, report: CollectReport) -> str | None:
        """Record one reply message; the reason it was refused, if it was."""
        try:
            reply = AdminReply.from_bytes(message.data)
        except AdminError as exc:
            return f"not an admin reply: {exc}"
        sender = None if message.uid is None else message.uid.qmgr
        if sender != reply.device:
            return f"a reply of {reply.device} to request {reply.request_id} sent by {sender}: a device answers only for itself"
        outcome = self.records.reply(reply, message.data, self.qm.now_ms())
        if outcome == "unknown":
            return f"no request {reply.request_id} was sent to {reply.device}"
        if outcome == "recorded":
            report.recorded += 1
            log.info("admin reply %s from %s: %s", reply.request_id, reply.device, reply.rc,
                     extra={"event": "admin-reply", "request_id": reply.request_id, "device": reply.device,
                            "rc": reply.rc})
        else:
            report.repeated += 1
        return None

    def record(self, request_id: str) -> AdminRecord | None:
        """A request as recorded, with its reply if one came (replies waiting are collected first)."""
        self.collect()
        return self.records.get(request_id)

    def pending(self, device: str | None = None) -> list[AdminRecord]:
        """The requests with no reply (of ``device``), oldest first; an expired one's
        :meth:`~edgeq.sync.server.admin.records.AdminRecord.status` is ``expired``."""
        self.collect()
        return self.records.pending(device)

    def replies(self, device: str | None = None, *, limit: int = 100) -> list[AdminRecord]:
        """The last ``limit`` replied requests (of ``device``), the latest reply first."""
        self.collect()
        return self.records.replied(device, limit=limit)

    def wait_all(self, handles: Iterable[AdminHandle], timeout: float | None) -> dict[str, AdminRecord]:
        """Wait up to ``timeout`` seconds (None: for ever) until every request of ``handles``
        is replied or expired; return each one's record by request id, as it then stands."""
        wanted = {h.request_id for h in handles}
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.collect()
            records = {rid: self._record(rid, collect=False) for rid in wanted}
            now = self.clock()
            if all(r.status(now) != "pending" for r in records.values()):
                return records
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return records
            time.sleep(self.poll_s if left is None else min(self.poll_s, left))

    # -- helpers ---------------------------------------------------------------------------

    def _signing_key(self) -> OperatorKey:
        if self.key is None:
            raise InvalidArgument("no operator key: give operator_key= (an edgeq admin keygen file) to send requests")
        return self.key

    def _record(self, request_id: str, *, collect: bool = True) -> AdminRecord:
        record = self.record(request_id) if collect else self.records.get(request_id)
        if record is None:
            raise EdgeqError(f"no admin request {request_id!r} was sent from this store (see edgeq admin pending)")
        return record

    def _ensure_queue(self, name: str) -> None:
        if name not in self.qm.queue_names():
            with contextlib.suppress(QueueExists):  # defined meanwhile by another process: as good
                self.qm.define_queue(name)


@dataclass(frozen=True, slots=True)
class AdminHandle:
    """One request sent by an :class:`AdminClient`: its status, and its reply once it came."""

    client: AdminClient
    request_id: str
    device: str

    @property
    def record(self) -> AdminRecord:
        """The request as recorded now (replies waiting are collected first)."""
        return self.client._record(self.request_id)

    @property
    def status(self) -> RequestStatus:
        """``pending``, ``replied``, ``expired`` (never executed: its expiry passed before any
        pull handed it over) or ``unknown`` (handed over, no reply by its expiry: it may have run)."""
        return self.record.status(self.client.clock())

    @property
    def reply(self) -> AdminReply | None:
        """The device's reply (None: none yet)."""
        return self.record.reply

    def wait(self, timeout: float | None = None) -> AdminReply | None:
        """Wait up to ``timeout`` seconds (None: for ever) for the reply; None if none came
        by then, or if its expiry passed with no reply (see :attr:`status`)."""
        return self.client.wait_all([self], timeout)[self.request_id].reply


def _operator_key(key: Ed25519PrivateKey | OperatorKey | Path | str | None, key_id: str | None) -> OperatorKey | None:
    if key is None or isinstance(key, OperatorKey):
        return key
    if isinstance(key, Ed25519PrivateKey):
        return OperatorKey(key, key_id or operator_key_id(public_bytes(key)))
    return OperatorKey.load(Path(key), key_id)
