"""The exceptions edgeq raises, all :class:`EdgeqError`; bad arguments are also ``ValueError``
(or ``TypeError``) and "not found" errors ``LookupError``, so code catching the built-ins works."""

from __future__ import annotations

__all__ = [
    "AdminError",
    "ConfirmIdNotFound",
    "DeviceExists",
    "DeviceNotFound",
    "DuplicateMessage",
    "EdgeqError",
    "ExpiryError",
    "InvalidArgument",
    "InvalidType",
    "KeyInUse",
    "MessageExpired",
    "MessageNotFound",
    "MessageTooLarge",
    "NameMismatch",
    "QueueExists",
    "QueueFull",
    "QueueManagerClosed",
    "QueueNotEmpty",
    "QueueNotFound",
    "RemoteUnavailable",
    "RuleConfigError",
    "RuleError",
    "RuleLoadError",
    "RuleNotFound",
    "StoreBusy",
    "StoreError",
    "StoreFull",
    "StoreReadOnly",
]


class EdgeqError(Exception):
    """Base class of every error edgeq raises."""


# -- bad input -----------------------------------------------------------------


class InvalidArgument(EdgeqError, ValueError):
    """An argument has the right type but a value edgeq cannot accept."""


class InvalidType(EdgeqError, TypeError):
    """An argument has a type edgeq cannot accept."""


class ExpiryError(InvalidArgument):
    """A message expiry is neither a valid relative ``Int32`` nor absolute ``Int64``."""


# -- the store -------------------------------------------------------------------


class StoreError(EdgeqError):
    """The database file cannot be used: not SQLite, not edgeq's, corrupt, or too new."""


class StoreReadOnly(StoreError):
    """The store may be read but not written by this user (file, directory or filesystem)."""


class NameMismatch(StoreError):
    """The database belongs to a queue manager with another name."""


class StoreBusy(StoreError):
    """Another connection held the database lock for longer than the busy timeout."""


class DeviceNotFound(EdgeqError, LookupError):
    """No device of that name is known to this (home server) queue manager."""


class DeviceExists(EdgeqError):
    """A device of that name is registered already (re-key it, or change its queues, instead)."""


class KeyInUse(EdgeqError):
    """Another device is registered with that public key: a signature would not say which device made it."""


class QueueManagerClosed(EdgeqError):
    """The queue manager was closed; open a new one to continue."""


# -- queues ----------------------------------------------------------------------


class QueueNotFound(EdgeqError, LookupError):
    """No queue of that name is defined on this queue manager."""


class QueueExists(EdgeqError):
    """A queue of that name is already defined."""


class QueueNotEmpty(EdgeqError):
    """The queue still holds unexpired messages, so it cannot be deleted."""


class RemoteUnavailable(EdgeqError):
    """A synchronous remote queue could not reach its target; nothing was kept."""


class QueueFull(EdgeqError):
    """A queue is at ``max_depth`` or ``max_bytes`` and its ``on_full`` could not make room."""


class StoreFull(QueueFull):
    """The store is at ``max_store_bytes`` and the queue's ``on_full`` could not make room from it."""


# -- messages ----------------------------------------------------------------------


class MessageTooLarge(EdgeqError):
    """The message is larger than the queue's ``max_message_bytes``."""


class DuplicateMessage(EdgeqError):
    """The queue already holds a message with this uid (and the put was not a resend)."""

    def __init__(self, text: str, uid: object = None) -> None:
        super().__init__(text)
        #: the refused uid (a :class:`~edgeq.uid.MessageUID`), when known
        self.uid = uid


class MessageNotFound(EdgeqError, LookupError):
    """No message with that uid (in the state the call needs) is on the queue."""


class ConfirmIdNotFound(MessageNotFound):
    """No message on the queue is locked under that confirm id."""


class MessageExpired(EdgeqError):
    """The message expired before the operation completed; it has been discarded."""


# -- rules -------------------------------------------------------------------------------


class RuleError(EdgeqError):
    """A queue rule could not be found, loaded, configured or run."""


class RuleNotFound(RuleError, LookupError):
    """No rule is installed under that name (entry point group ``edgeq.rules``)."""


class RuleLoadError(RuleError):
    """A rule plugin is installed but failed to import or is not a QueueRule."""


class RuleConfigError(RuleError, InvalidArgument):
    """A rule binding's config was refused by the rule."""


# -- remote administration -----------------------------------------------------------------


class AdminError(EdgeqError):
    """An admin request or reply is not CBOR, oversize, of an unknown version, or has a bad field."""
