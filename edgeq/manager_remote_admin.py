"""The queue manager's remote administration verbs: the operator keys a device trusts, and
executing the admin requests an operator sends it (MQe's admin messages). Part of
:class:`~edgeq.manager.QueueManager`; the work is :mod:`edgeq.admin.executor`, imported when used
so ``import edgeq`` does not pay for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from edgeq.store.connection import ConnectionFactory

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from edgeq.admin.executor import AdminExecutor
    from edgeq.admin.store import AdminKey
    from edgeq.admin.wire import AdminReply

__all__ = ["RemoteAdminVerbs"]


class RemoteAdminVerbs:
    """Admin keys and admin requests (a mixin of ``QueueManager``: it uses the store the queue
    manager opened, and the queue manager's own verbs to run each action)."""

    _db: ConnectionFactory

    def _admin(self) -> AdminExecutor:
        from edgeq.admin.actions import AdminHost
        from edgeq.admin.executor import AdminExecutor

        # Built per call: it holds no state of its own (the store does).
        return AdminExecutor(cast(AdminHost, self), self._db)

    def trust_admin_key(
        self, key_id: str, public_key: bytes | str | Ed25519PublicKey, *, actions: Sequence[str] = ("*",)
    ) -> AdminKey:
        """Trust operator key ``key_id`` (its Ed25519 public key: 32 raw bytes, or the PEM of a
        ``.pub`` file) to sign admin requests for ``actions`` (``"*"``: every action; see
        :data:`edgeq.admin.wire.ACTIONS`, :data:`~edgeq.admin.wire.INQUIRE_ACTIONS`). Trusting an id
        again replaces its key and actions.

        >>> import tempfile, os
        >>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        >>> from edgeq import QueueManager
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> key = qm.trust_admin_key("ops", Ed25519PrivateKey.generate().public_key(), actions=["inquire-queue"])
        >>> [(k.key_id, k.actions) for k in qm.admin_keys()]
        [('ops', ('inquire-queue',))]
        >>> qm.close()
        """
        return self._admin().trust(key_id, public_key, actions)

    def untrust_admin_key(self, key_id: str) -> bool:
        """Stop trusting operator key ``key_id``; whether it was trusted. Requests it signed,
        and not yet run, are refused from now on."""
        return self._admin().untrust(key_id)

    def admin_keys(self) -> list[AdminKey]:
        """The operator keys this queue manager trusts, by id."""
        return self._admin().keys()

    def execute_admin(self, request: bytes, *, remaining_ms: int | None = None) -> AdminReply:
        """Check and run one admin request (the bytes of an :class:`~edgeq.admin.wire.AdminRequest`),
        at most once; return its reply (also remembered). Never raises for what the request holds:
        a malformed, unsigned, tampered, untrusted, forbidden, misrouted, replayed or expired
        request gets a failed reply and is not run; a request answered before gets the same
        reply again without running; an action that fails gets a failed reply with the reason.
        ``remaining_ms``: the lifetime the request had left when it arrived (its message's
        remaining expiry); None counts its signed lifetime from now. Its expiry is judged on
        this clock alone (:func:`edgeq.admin.executor.deadline_ms`).

        >>> import tempfile, os
        >>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        >>> from edgeq import QueueManager
        >>> from edgeq.admin.wire import AdminRequest
        >>> qm = QueueManager(os.path.join(tempfile.mkdtemp(), "d.db"), name="DEV1")
        >>> key = Ed25519PrivateKey.generate(); _ = qm.trust_admin_key("ops", key.public_key())
        >>> req = AdminRequest.create("define-queue", "ORDERS", {"expiry_ms": 60000}, device="DEV1",
        ...                           reply_qmgr="HOME", created_ms=qm.now_ms(), key_id="ops").sign(key)
        >>> qm.execute_admin(req.to_bytes()).rc, qm.queue_attributes("ORDERS").expiry_ms
        ('success', 60000)
        >>> qm.execute_admin(req.to_bytes()).rc  # the same request again: remembered, not run twice
        'success'
        >>> qm.close()
        """
        return self._admin().execute(request, remaining_ms)

    def process_admin(self, *, limit: int = 100) -> list[AdminReply]:
        """Run up to ``limit`` requests waiting on the admin queue (``SYSTEM.ADMIN``), each as
        :meth:`execute_admin` does, put each reply on the request's reply queue (normally the
        remote queue ``SYSTEM.ADMIN.REPLY``) and then remove the request; return the replies.
        One run at a time per store (a lease; a run that finds another under way returns []).
        After a crash the next run takes the request again: it is answered from the remembered
        reply, and the reply is the same message (same uid) as any put before. Nothing to do
        without an admin queue. The sync agent calls this after each pull."""
        return self._admin().process(limit)

    def admin_history(self, *, limit: int = 100) -> list[AdminReply]:
        """The replies this queue manager remembers (run, refused, interrupted), newest first:
        the device's record of the admin requests it received, kept 31 days."""
        return self._admin().history(limit)
