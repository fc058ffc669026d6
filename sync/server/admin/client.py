"""The operator's side of remote administration, on the home server's store.

How requests and replies travel, and why each is taken exactly once: docs/admin.md, "Transport".
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

from edgeq.admin.wire import (
    ADMIN_QUEUE,
    ADMIN_REPLY_QUEUE,
    AdminReply,
    AdminRequest,
    request_message,
)
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
    """The id devices know an operator key by: 16 hex digits of the SHA-256 of its raw public key.

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
        key = load_private_key(path, "operator key")
        return cls(key, key_id or operator_key_id(public_bytes(key)))


def new_operator_key(path: Path, *, overwrite: bool = False) -> tuple[KeyPair, str]:
    """Make an operator key pair (``path``, mode 0600, and ``.pub``); return the files and its id."""
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

    ``home``: a queue manager, or a store path (opened and closed here).

    >>> import tempfile, os; from edgeq import QueueManager
    >>> home = QueueManager(os.path.join(tempfile.mkdtemp(), "home.db"), name="HOME")
    >>> home.register_device("DEV1", bytes(32))  # no other device has this key
    []
    >>> client = AdminClient(home, operator_key=Ed25519PrivateKey.generate())
    >>> client.request("DEV1", "inquire-queue", "ORDERS").status, home.depth("DEV1.SYSTEM.ADMIN")
    ('pending', 1)
    >>> client.close(); home.close()
    """

    def __init__(
        self, home: QueueManager | str | Path, *,
        operator_key: Ed25519PrivateKey | OperatorKey | Path | str | None = None,
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
        """The devices a fan-out reaches: every known device not revoked, by name."""
        return [d.name for d in self.qm.devices() if d.revoked_ms is None]

    def request(
        self, device: str, action: str, target: str | None = None,
        params: Mapping[str, object] | None = None, *, expires_ms: int | None = None,
    ) -> AdminHandle:
        """Sign a request for ``device``, record it, and queue it for the device's next pull;
        ``expires_ms`` (epoch ms, this client's clock): not taken by then, it is never executed."""
        key = self._signing_key()
        record = self.qm.device(device)
        if record is None:
            raise DeviceNotFound(
                f"no device {device!r} is known here: it has never said hello to this server "
                f"and is not registered (edgeq server devices add {device})"
            )
        if record.revoked_ms is not None:
            raise InvalidArgument(
                f"device {device} is revoked (since {record.revoked_at}): it can no longer sync")
        now = self.clock()
        if expires_ms is not None and expires_ms <= now:
            raise InvalidArgument(
                f"expires_ms {expires_ms} is not in the future (now {now}): give a later time")
        held = device_queue_name(device, ADMIN_QUEUE)
        request = AdminRequest.create(
            action, target, params, device=device, reply_qmgr=self.qm.name, created_ms=now,
            key_id=key.key_id, expires_ms=expires_ms,
        ).sign(key.private_key)
        message = request_message(request)
        self._ensure_queue(held)
        # Recorded first: a reply can only ever be for a request the server knows.
        self.records.add(request, message.data)
        self.qm.put(held, message)
        log.info("admin request %s to %s: %s %s", request.request_id, device, action, target or "",
                 extra={"event": "admin-request", "request_id": request.request_id,
                        "device": device, "action": action, "target": target,
                        "expires_ms": expires_ms})
        return AdminHandle(self, request.request_id, device)

    def request_all(
        self, action: str, target: str | None = None, params: Mapping[str, object] | None = None,
        *, expires_ms: int | None = None,
    ) -> list[AdminHandle]:
        devices = self.devices()
        if not devices:
            raise DeviceNotFound("this server knows no device (none said hello, none is registered): "
                                 "nothing to send to")
        return [self.request(d, action, target, params, expires_ms=expires_ms) for d in devices]

    def resend(self, request_id: str) -> AdminHandle:
        """Put the same signed request on its device's admin queue again (a device that ran it
        answers from its remembered reply); refused if its expiry passed or its device is revoked."""
        record = self._record(request_id)
        now = self.clock()
        if record.expires_ms is not None and now >= record.expires_ms:
            raise EdgeqError(f"request {request_id} expired {(now - record.expires_ms) / 1000:.0f} s ago: a "
                             "device would never run it; send a new request")
        device = self.qm.device(record.device)
        if device is not None and device.revoked_ms is not None:
            raise EdgeqError(f"device {record.device} is revoked (since {device.revoked_at}): it would never "
                             "take the request; re-key it first (edgeq server devices rekey)")
        held = device_queue_name(record.device, ADMIN_QUEUE)
        self._ensure_queue(held)
        self.qm.put(held, request_message(AdminRequest.from_bytes(record.request)))
        return AdminHandle(self, record.request_id, record.device)

    def handle(self, request_id: str) -> AdminHandle:
        record = self._record(request_id)
        return AdminHandle(self, record.request_id, record.device)

    # -- replies ---------------------------------------------------------------------------

    def collect(self, limit: int = 500) -> CollectReport:
        """Move up to ``limit`` replies from ``SYSTEM.ADMIN.REPLY`` into ``admin_requests``: assured
        get, record, confirm; a bad one or another device's is dropped with a warning."""
        report = CollectReport()
        # Whatever a collector that died left locked is offered again: recording is idempotent.
        self.qm.release_locks(ADMIN_REPLY_QUEUE)
        got = self.qm.get_many(ADMIN_REPLY_QUEUE, limit,
                               confirm_id=secrets.randbelow(MAX_CONFIRM_ID) + 1)
        for message in got:
            why = self._take(message, report)
            if why is not None:
                report.refused.append((str(message.uid), why))
                log.warning("admin reply %s dropped: %s", message.uid, why,
                            extra={"event": "admin-reply-refused", "uid": str(message.uid),
                                   "why": why})
        if got:
            self.qm.confirm_get_each(ADMIN_REPLY_QUEUE, [m.uid for m in got if m.uid is not None])
        return report

    def _take(self, message: Message, report: CollectReport) -> str | None:
        try:
            reply = AdminReply.from_bytes(message.data)
        except AdminError as exc:
            return f"not an admin reply: {exc}"
        sender = None if message.uid is None else message.uid.qmgr
        if sender != reply.device:
            return (f"a reply of {reply.device} to request {reply.request_id} sent by {sender}: "
                    "a device answers only for itself")
        outcome = self.records.reply(reply, message.data, self.qm.now_ms())
        if outcome == "unknown":
            return f"no request {reply.request_id} was sent to {reply.device}"
        if outcome == "recorded":
            report.recorded += 1
            log.info("admin reply %s from %s: %s", reply.request_id, reply.device, reply.rc,
                     extra={"event": "admin-reply", "request_id": reply.request_id,
                            "device": reply.device, "rc": reply.rc})
        else:
            report.repeated += 1
        return None

    def record(self, request_id: str) -> AdminRecord | None:
        """A request as recorded, with its reply if one came (waiting replies collected first)."""
        self.collect()
        return self.records.get(request_id)

    def pending(self, device: str | None = None) -> list[AdminRecord]:
        """The requests with no reply (of ``device``), oldest first."""
        self.collect()
        return self.records.pending(device)

    def replies(self, device: str | None = None, *, limit: int = 100) -> list[AdminRecord]:
        """The last ``limit`` replied requests (of ``device``), the latest reply first."""
        self.collect()
        return self.records.replied(device, limit=limit)

    def wait_all(self, handles: Iterable[AdminHandle], timeout: float | None) -> dict[str, AdminRecord]:
        """Wait up to ``timeout`` s (None: for ever) until every request is replied or expired; return
        the records by request id."""
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
            raise InvalidArgument(
                "no operator key: give operator_key= (an edgeq admin keygen file) to send requests")
        return self.key

    def _record(self, request_id: str, *, collect: bool = True) -> AdminRecord:
        record = self.record(request_id) if collect else self.records.get(request_id)
        if record is None:
            raise EdgeqError(
                f"no admin request {request_id!r} was sent from this store (see edgeq admin pending)")
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
        return self.client._record(self.request_id)

    @property
    def status(self) -> RequestStatus:
        """How it stands now (docs/admin.md, "What the operator is told")."""
        return self.record.status(self.client.clock())

    @property
    def reply(self) -> AdminReply | None:
        return self.record.reply

    def wait(self, timeout: float | None = None) -> AdminReply | None:
        """Wait up to ``timeout`` s (None: for ever) for the reply; None if none came."""
        return self.client.wait_all([self], timeout)[self.request_id].reply


def _operator_key(key: Ed25519PrivateKey | OperatorKey | Path | str | None,
                  key_id: str | None) -> OperatorKey | None:
    if key is None or isinstance(key, OperatorKey):
        return key
    if isinstance(key, Ed25519PrivateKey):
        return OperatorKey(key, key_id or operator_key_id(public_bytes(key)))
    return OperatorKey.load(Path(key), key_id)
