"""Helpers for the admin tests: an operator key, signed requests, and the requests' queues."""

from __future__ import annotations

from collections.abc import Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import QueueManager
from edgeq.admin.wire import ADMIN_QUEUE, ADMIN_REPLY_QUEUE, AdminReply, AdminRequest, request_message

#: The operator's key pair, trusted as "ops" by the devices of the tests.
OPERATOR = Ed25519PrivateKey.generate()


def signed(
    qm: QueueManager, action: str, target: str | None = None, params: Mapping[str, object] | None = None, *,
    device: str | None = None, key: Ed25519PrivateKey | None = OPERATOR, key_id: str = "ops",
    created_ms: int | None = None, expires_ms: int | None = None, reply_queue: str = ADMIN_REPLY_QUEUE,
) -> AdminRequest:
    """A request for ``qm`` (made now by its clock), signed with ``key`` (None: unsigned)."""
    request = AdminRequest.create(
        action, target, params, device=device or qm.name, reply_qmgr="HOME", key_id=key_id,
        created_ms=qm.now_ms() if created_ms is None else created_ms, expires_ms=expires_ms,
        reply_queue=reply_queue,
    )
    return request if key is None else request.sign(key)


def admin_queues(qm: QueueManager) -> None:
    """The admin queue and a local reply queue, as a one-store test needs them."""
    qm.define_queue(ADMIN_QUEUE)
    qm.define_queue(ADMIN_REPLY_QUEUE)


def enqueue(qm: QueueManager, request: AdminRequest) -> None:
    """Put ``request`` on the admin queue, as the home-server pull would."""
    qm.put(ADMIN_QUEUE, request_message(request))


def replies(qm: QueueManager, queue: str = ADMIN_REPLY_QUEUE) -> list[AdminReply]:
    """The replies waiting on ``queue``, in order (browsed: left there)."""
    return [AdminReply.from_bytes(m.data) for m in qm.browse(queue)]
