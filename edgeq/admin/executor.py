"""The device's admin executor: checks an admin request, runs it at most once, remembers and
sends its reply. The checks in order, and why at most once: docs/admin.md, 'On the device'."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from edgeq.admin.actions import AdminHost, item, run_action
from edgeq.admin.store import REFUSED_PREFIX, AdminKey, AdminRecord, AdminTx
from edgeq.admin.wire import (
    ACTIONS,
    ADMIN_QUEUE,
    ADMIN_REPLY_QUEUE,
    AdminReply,
    AdminRequest,
    check_key_id,
    overall_rc,
    raw_public_key,
    reply_message,
)
from edgeq.args import check_non_negative, check_positive
from edgeq.errors import AdminError, EdgeqError, InvalidArgument, InvalidType, MessageNotFound
from edgeq.message import Message
from edgeq.store.connection import ConnectionFactory
from edgeq.store.damage import damaged
from edgeq.store.tx import Tx
from edgeq.uid import MessageUID

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "INTERRUPTED", "LEASE_MS", "MAX_REFUSED", "MAX_SKEW_MS", "RETENTION_MS", "AdminExecutor", "deadline_ms",
]

log = logging.getLogger("edgeq.admin")

#: How long a device remembers a reply, and so how old a request it still takes: 30 days.
RETENTION_MS: Final = 30 * 86_400_000
#: How far in the future (operator clock ahead of the device's) a request may be created.
MAX_SKEW_MS: Final = 86_400_000
#: Refusals of unauthenticated requests remembered at most (the oldest forgotten first): what a
#: broken or hostile server sending distinct garbage may make a device keep. A forgotten one
#: sent again is refused again, with a reply of its own.
MAX_REFUSED: Final = 1_000
#: How long one ``process_admin`` holds the admin lease without renewing it.
LEASE_MS: Final = 600_000
#: The reply of a request whose action started and never recorded its outcome.
INTERRUPTED: Final = (
    "interrupted: outcome unknown, inquire (the action started on this device and its outcome "
    "was never recorded, e.g. the process was killed; it is not run again)"
)


def deadline_ms(request: AdminRequest, arrived_ms: int, remaining_ms: int | None) -> int | None:
    """When ``request``, arrived at ``arrived_ms`` with ``remaining_ms`` of its message's lifetime
    left (None: none), expires on this device's clock; None: never. Bounded by the signed lifetime.

    >>> from edgeq.admin.wire import AdminRequest
    >>> r = AdminRequest.create("sweep", device="D", reply_qmgr="H", created_ms=1_000, key_id="k",
    ...                         expires_ms=121_000)
    >>> deadline_ms(r, 900_000, 30_000), deadline_ms(r, 900_000, None), deadline_ms(r, 900_000, 500_000)
    (930000, 1020000, 1020000)
    """
    lifetime = None if request.expires_ms is None else request.expires_ms - request.created_ms
    found = [arrived_ms + left for left in (remaining_ms, lifetime) if left is not None]
    return min(found) if found else None


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A reply, the stamp of its message's uid, and where it goes (None: :data:`ADMIN_REPLY_QUEUE`)."""

    reply: AdminReply
    stamp: int
    reply_queue: str | None
    key: str  #: what the reply is remembered under (``admin_replies``)


class AdminExecutor:
    """Admin requests on one queue manager (``host``), whose store is ``db``."""

    def __init__(self, host: AdminHost, db: ConnectionFactory) -> None:
        self.host = host
        self.db = db

    # -- trusted keys ------------------------------------------------------------------------

    def trust(
        self, key_id: str, public_key: bytes | str | Ed25519PublicKey, actions: Sequence[str]
    ) -> AdminKey:
        check_key_id(key_id)
        raw = raw_public_key(public_key)
        if isinstance(actions, str) or not isinstance(actions, Sequence) or not actions:
            raise InvalidType("actions must be a non-empty list of action names, or ['*'] for every action")
        unknown = [a for a in actions if a != "*" and a not in ACTIONS]
        if unknown:
            raise InvalidArgument(
                f"unknown admin action(s) {', '.join(map(repr, unknown))}: use {', '.join(ACTIONS)} or '*'"
            )
        chosen = ("*",) if "*" in actions else tuple(dict.fromkeys(actions))
        key = AdminKey(key_id, raw, chosen, self.host.now_ms())
        with self.db.write() as conn:
            AdminTx(conn).trust(key)
        log.info("admin key %s trusted for %s", key_id, ", ".join(chosen))
        return key

    def untrust(self, key_id: str) -> bool:
        check_key_id(key_id)
        with self.db.write() as conn:
            gone = AdminTx(conn).untrust(key_id)
        if gone:
            log.info("admin key %s no longer trusted", key_id)
        return gone

    def keys(self) -> list[AdminKey]:
        with self.db.read() as conn:
            return AdminTx(conn).keys()

    def history(self, limit: int) -> list[AdminReply]:
        limit = check_positive(limit, "limit")
        with self.db.read() as conn:
            records = AdminTx(conn).history(limit)
        return [_decoded(r) for r in records]

    # -- executing -----------------------------------------------------------------------------

    def execute(self, data: bytes, remaining_ms: int | None = None) -> AdminReply:
        """Check and run one encoded request, at most once; return its reply. ``remaining_ms``:
        the lifetime its message had left on arrival (None: its signed lifetime)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidType(f"execute_admin takes the request's bytes, not {type(data).__name__}")
        if remaining_ms is not None:
            check_non_negative(remaining_ms, "remaining_ms")
        return self._execute(bytes(data), "", self.host.now_ms(), remaining_ms).reply

    def _execute(self, data: bytes, claimed_id: str, arrived_ms: int, remaining_ms: int | None) -> _Outcome:
        now = self.host.now_ms()
        try:
            request = AdminRequest.from_bytes(data)
        except AdminError as exc:
            return self._unauthenticated(data, claimed_id, None, f"refused: {exc}", now)
        with self.db.read() as conn:
            key = AdminTx(conn).key(request.key_id)
        if not request.signature:
            return self._unauthenticated(
                data, request.request_id, request.target,
                "refused: the request is unsigned; requests must be signed with a trusted operator key", now)
        if key is None:
            return self._unauthenticated(
                data, request.request_id, request.target,
                f"refused: key {request.key_id!r} is not trusted here: trust it with `edgeq keys trust-admin "
                f"{request.key_id} KEY.pub`", now)
        if not request.verify(key.public_key):
            return self._unauthenticated(
                data, request.request_id, request.target,
                f"refused: the signature does not verify with key {request.key_id!r}: "
                "the request was changed after it was signed (tampered), or signed with another key", now)
        return self._authenticated(request, key, now, deadline_ms(request, arrived_ms, remaining_ms))

    def _unauthenticated(
        self, data: bytes, request_id: str, target: str | None, reason: str, now: int
    ) -> _Outcome:
        """Refuse a request not from a trusted key, remembered under the digest of its bytes."""
        log.warning("admin request %s refused: %s", request_id or "(no id)", reason)
        reply = AdminReply(request_id, self.host.name, "failed", (item(target, reason, authenticated=False),),
                           reason, now)
        record_key = REFUSED_PREFIX + hashlib.sha256(data).hexdigest()[:32]
        with self.db.write() as conn:
            admin = AdminTx(conn)
            known = admin.remembered(record_key)
            if known is not None:
                return _Outcome(_decoded(known), known.stamp, None, record_key)
            stamp = Tx(conn).stamps(now, 1)
            admin.prune(now - RETENTION_MS - MAX_SKEW_MS)
            admin.prune_refused(MAX_REFUSED - 1)
            admin.remember(record_key, now, reply.to_bytes(), stamp, final=True)
        return _Outcome(reply, stamp, None, record_key)

    def _refusal(self, request: AdminRequest, key: AdminKey, now: int, deadline: int | None) -> str | None:
        """Why an authenticated request must not run, or None."""
        if request.device != self.host.name:
            return (f"refused: the request is for queue manager {request.device}, "
                    f"and this is {self.host.name}: it was routed to the wrong device")
        if not key.allows(request.action):
            return (f"refused: key {request.key_id!r} may not run {request.action} (it may run "
                    f"{', '.join(key.actions)}): "
                    "sign with another key, or widen it with edgeq keys trust-admin")
        if request.created_ms < now - RETENTION_MS:
            return (f"refused: the request was created {(now - request.created_ms) // 86_400_000} days ago, "
                    f"beyond the {RETENTION_MS // 86_400_000} days this device remembers requests "
                    "(a replay, or a request held too long): make a new one")
        if request.created_ms > now + MAX_SKEW_MS:
            return ("refused: the request was created more than a day in the future by this device's clock: "
                    "check the operator's and the device's clocks")
        if deadline is not None and deadline <= now:
            return "expired before execution: the request's lifetime ran out before this device ran it"
        return None

    def _authenticated(
        self, request: AdminRequest, key: AdminKey, now: int, deadline: int | None
    ) -> _Outcome:
        rid, target = request.request_id, request.target
        reason = self._refusal(request, key, now, deadline)
        # The refusal, or the marker: remembered in the transaction that finds nothing remembered.
        first = AdminReply(
            rid, self.host.name, "failed", (item(target, reason or INTERRUPTED),), reason or INTERRUPTED, now
        )
        with self.db.write() as conn:
            admin = AdminTx(conn)
            known = admin.remembered(rid)
            if known is not None:
                log.info("admin request %s (%s) answered from its remembered reply: not run again", rid,
                         request.action)
                return _Outcome(_decoded(known), known.stamp, request.reply_queue, rid)
            stamp = Tx(conn).stamps(now, 1)
            admin.prune(now - RETENTION_MS - MAX_SKEW_MS)
            admin.remember(rid, now, first.to_bytes(), stamp, final=reason is not None)
        if reason is not None:
            log.warning(
                "admin request %s (%s) by key %s refused: %s", rid, request.action, request.key_id, reason
            )
            return _Outcome(first, stamp, request.reply_queue, rid)
        items, message = run_action(self.host, self.db, request)
        reply = self._reply(request, items, message, now)
        with self.db.write() as conn:
            AdminTx(conn).finish(rid, now, reply.to_bytes(), stamp)
        log.info("admin request %s (%s %s) by key %s: %s", rid, request.action, target or "", request.key_id,
                 reply.message)
        return _Outcome(reply, stamp, request.reply_queue, rid)

    def _reply(
        self, request: AdminRequest, items: list[dict[str, object]], message: str, now: int
    ) -> AdminReply:
        """The reply of an action that ran, or a failed one if its values cannot travel."""
        try:
            reply = AdminReply(
                request.request_id, self.host.name, overall_rc(items), tuple(items), message[:1000], now
            )
            reply.to_bytes()
        except EdgeqError as exc:
            reason = f"the action ran, but its reply cannot be sent ({exc}): inquire fewer objects"
            log.error("admin request %s: %s", request.request_id, reason)
            return AdminReply(
                request.request_id, self.host.name, "failed", (item(request.target, reason),), reason, now
            )
        return reply

    # -- the admin queue -----------------------------------------------------------------------

    def process(self, limit: int) -> list[AdminReply]:
        limit = check_positive(limit, "limit")
        if ADMIN_QUEUE not in self.host.queue_names():
            return []
        token = secrets.token_hex(8)
        # Read before the browse: each message's remaining lifetime is measured no earlier.
        arrived = self.host.now_ms()
        if not self._lease(token):
            log.info("another process_admin holds the admin lease of %s: leaving the requests to it",
                     self.host.name)
            return []
        replies = []
        try:
            for message in self.host.browse(ADMIN_QUEUE, limit=limit):
                if not self._lease(token):
                    break  # taken over (this run outlived its lease): the new holder carries on
                outcome = self._execute(
                    message.data, _claimed_id(message), arrived, message.remaining_expiry_ms)
                self._send(outcome)
                if message.uid is not None:
                    with contextlib.suppress(MessageNotFound):  # purged meanwhile (a request may purge it)
                        self.host.delete_message(ADMIN_QUEUE, message.uid)
                replies.append(outcome.reply)
        finally:
            with self.db.write(durable=False) as conn:
                AdminTx(conn).release_lease(token)
        return replies

    def _lease(self, token: str) -> bool:
        now = self.host.now_ms()
        # Not waited onto the disk: a lease lost in a power cut is a lease no process holds.
        with self.db.write(durable=False) as conn:
            return AdminTx(conn).take_lease(token, now, now + LEASE_MS)

    def _send(self, outcome: _Outcome) -> None:
        """Put the reply on its reply queue as the message of its one uid (again after a crash:
        a duplicate)."""
        queue = outcome.reply_queue or ADMIN_REPLY_QUEUE
        reply = outcome.reply
        message = reply_message(reply, MessageUID(self.host.origin, outcome.stamp))
        try:
            (result,) = self.host.put_each(queue, [message])
        except EdgeqError as exc:
            log.error("the reply to admin request %s cannot be put on %s (%s); it stays remembered: "
                      "a resend of the request gets it", reply.request_id or "(no id)", queue, exc)
            return
        if result.status != "refused" and result.uid.stamp != outcome.stamp:
            # Put under a new uid (the old one is below the settled mark: docs/protocol.md): the
            # record follows it, so a replay while this copy waits is the same message again.
            with self.db.write() as conn:
                AdminTx(conn).restamp(outcome.key, result.uid.stamp)
        if result.status == "refused":
            log.error("the reply to admin request %s was refused by %s (%s); it stays remembered: "
                      "a resend of the request gets it", reply.request_id or "(no id)", queue, result.detail)


def _decoded(record: AdminRecord) -> AdminReply:
    """A remembered reply; one that does not decode is damage (edgeq wrote it whole)."""
    try:
        return AdminReply.from_bytes(record.reply)
    except AdminError as exc:
        raise damaged(f"the remembered admin reply {record.key!r} does not decode ({exc})") from exc


def _claimed_id(message: Message) -> str:
    """The request id a message's correlation id names (for the reply to a malformed request)."""
    cid = message.correlation_id
    return cid.hex() if cid is not None and 8 <= len(cid) <= 32 else ""

