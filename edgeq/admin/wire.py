"""Admin messages (MQe's administration by message): the request an operator signs and a device
executes, and the reply it sends back. Pure: no I/O, no store. Fields, bounds, signing: docs/admin.md.

>>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
>>> key = Ed25519PrivateKey.generate()
>>> req = AdminRequest.create("inquire-queue", "ORDERS", device="DEV1", reply_qmgr="HOME",
...                           created_ms=1_763_683_200_000, key_id="ops").sign(key)
>>> again = AdminRequest.from_bytes(req.to_bytes())
>>> again == req, again.verify(key.public_key()), again.replace_params(x=1).verify(key.public_key())
(True, True, False)
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias, get_args

import cbor2
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edgeq.encoding.cbor import DecodeLimits, describe, loads
from edgeq.errors import AdminError, EdgeqError, InvalidArgument, InvalidType
from edgeq.message import Message
from edgeq.names import check_name
from edgeq.types import MAX_INT64
from edgeq.uid import MessageUID
from edgeq.values import Int64

__all__ = [
    "ACTIONS",
    "ADMIN_QUEUE",
    "ADMIN_REPLY_QUEUE",
    "ADMIN_SCHEMA",
    "INQUIRE_ACTIONS",
    "MAX_REPLY_BYTES",
    "MAX_REQUEST_BYTES",
    "AdminAction",
    "AdminReply",
    "AdminRequest",
    "ReplyRC",
    "as_python",
    "check_key_id",
    "new_request_id",
    "overall_rc",
    "raw_public_key",
    "reply_message",
    "request_message",
]

#: The device's admin queue: a home-server queue, so the home server holds DEV's requests on
#: ``DEV.SYSTEM.ADMIN`` and the device pulls them.
ADMIN_QUEUE: Final = "SYSTEM.ADMIN"
#: Where replies go: on the home server a local queue; on a device a remote queue of that
#: name targeting the home server's.
ADMIN_REPLY_QUEUE: Final = "SYSTEM.ADMIN.REPLY"
ADMIN_SCHEMA: Final = 1

AdminAction: TypeAlias = Literal[
    "inquire-queue", "inquire-all", "define-queue", "alter-queue", "delete-queue", "purge", "sweep",
    "inquire-rules", "retry-rules", "inquire-sync",
]
ACTIONS: Final[tuple[str, ...]] = get_args(AdminAction)
#: The actions that change nothing but expired messages (what ``--inquire-only`` allows).
INQUIRE_ACTIONS: Final = ("inquire-queue", "inquire-all", "inquire-rules", "inquire-sync")
#: MQe's RC_Success, RC_Fail and RC_Mixed: every item succeeded, every one failed, or some of each.
ReplyRC: TypeAlias = Literal["success", "failed", "mixed"]

#: The largest encoded request a device decodes, and the largest reply it sends.
MAX_REQUEST_BYTES: Final = 64 * 1024
MAX_REPLY_BYTES: Final = 1024 * 1024
_REQUEST_LIMITS: Final = DecodeLimits(max_depth=8, max_items=4_096)
_REPLY_LIMITS: Final = DecodeLimits(max_depth=8, max_items=100_000)
_MAX_TEXT: Final = 4_096  # a text value in params or a reply: a name, a reason
_REQUEST_ID: Final = re.compile(r"(?:[0-9a-f]{2}){8,32}")
_KEY_ID: Final = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_REQUEST_KEYS: Final = frozenset({
    "v", "type", "id", "action", "target", "params", "device", "reply_qmgr", "reply_queue", "created_ms",
    "expires_ms", "key_id", "sig",
})
_REPLY_KEYS: Final = frozenset({"v", "type", "id", "device", "rc", "results", "message", "executed_ms"})


def new_request_id() -> str:
    """A fresh random request id: 32 lowercase hex digits (128 bits)."""
    return secrets.token_hex(16)


def check_key_id(value: object) -> str:
    """Return ``value`` if it is a valid operator key id: 1 to 64 of ``A-Za-z0-9._@-``."""
    if not isinstance(value, str):
        raise InvalidType(f"an admin key id must be a str, not {type(value).__name__}")
    if not _KEY_ID.fullmatch(value):
        raise InvalidArgument(f"admin key id {describe(value)} is not valid: "
                              "use 1 to 64 of A-Z, a-z, 0-9, '.', '_', '@' and '-', e.g. 'ops-alice'")
    return value


def raw_public_key(key: bytes | str | Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of an Ed25519 public key given raw, as PEM (a ``.pub`` file) or as a key object."""
    if isinstance(key, Ed25519PublicKey):
        return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray)):
        raise InvalidType(
            f"a public key is raw bytes, PEM text or an Ed25519PublicKey, not {type(key).__name__}"
        )
    if len(key) == 32:
        return bytes(key)
    try:
        loaded = serialization.load_pem_public_key(bytes(key))
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InvalidArgument(f"not an Ed25519 public key (32 raw bytes or a PEM .pub file): {exc}") from exc
    if not isinstance(loaded, Ed25519PublicKey):
        raise InvalidArgument(f"the PEM holds a {type(loaded).__name__}, not an Ed25519 public key")
    return raw_public_key(loaded)


# -- plain values: what params and reply values may hold --------------------------------------


def _plain(value: object, where: str, depth: int, *, floats: bool) -> object:
    """``value`` checked to be plain CBOR data (floats only in replies), frozen: lists become
    tuples, maps read-only."""
    if depth > 6:
        raise InvalidArgument(f"{where} nests too deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value <= MAX_INT64:
            raise InvalidArgument(f"{where} is {describe(value)}: integers are at most 64 bits")
        return value
    if isinstance(value, float) and floats:
        return value
    if isinstance(value, str):
        if len(value) > _MAX_TEXT:
            raise InvalidArgument(f"{where} is longer than {_MAX_TEXT} characters")
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v, f"{where}[{i}]", depth + 1, floats=floats) for i, v in enumerate(value))
    if isinstance(value, Mapping):
        return MappingProxyType(_plain_map(value, where, depth + 1, floats=floats))
    kinds = "null, booleans, integers, text, bytes" + (", floats" if floats else "")
    raise InvalidType(f"{where} is a {type(value).__name__}: use {kinds}, lists and maps of them")


def _plain_map(value: object, where: str, depth: int, *, floats: bool) -> dict[str, object]:
    if not isinstance(value, Mapping):
        raise InvalidType(f"{where} must be a map, not {type(value).__name__}")
    out: dict[str, object] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > 64:
            raise InvalidArgument(f"{where} has key {describe(key)}: keys are text of 1 to 64 characters")
        out[key] = _plain(item, f"{where}[{key!r}]", depth, floats=floats)
    return out


def as_python(value: object) -> object:
    """A frozen plain value (params, a result's values) as ordinary dicts and lists.

    >>> as_python(MappingProxyType({"rules": ("log", ("dead-letter", MappingProxyType({"queue": "DLQ"})))}))
    {'rules': ['log', ['dead-letter', {'queue': 'DLQ'}]]}
    """
    if isinstance(value, Mapping):
        return {k: as_python(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [as_python(v) for v in value]
    return value


def _int(value: object, what: str, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be an int (epoch ms), not {describe(value)}")
    if not low <= value <= MAX_INT64:
        raise InvalidArgument(f"{what} {value} is out of range")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidType(f"{what} must be text, not {describe(value)}")
    if len(value) > _MAX_TEXT:
        raise InvalidArgument(f"{what} is longer than {_MAX_TEXT} characters")
    return value


def _decode(
    data: object, kind: str, limit: int, limits: DecodeLimits, keys: frozenset[str]
) -> dict[str, Any]:
    """The checked top-level map of an encoded admin message (``kind``: request or reply)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise AdminError(f"an admin {kind} is bytes, not {type(data).__name__}")
    raw = bytes(data)
    if len(raw) > limit:
        raise AdminError(f"malformed admin {kind}: {len(raw)} bytes, more than the {limit} allowed")
    try:
        body = loads(raw, limits)
    except EdgeqError as exc:
        raise AdminError(f"malformed admin {kind}: {exc}") from exc
    if not isinstance(body, dict):
        raise AdminError(f"malformed admin {kind}: a CBOR map is expected, not {type(body).__name__}")
    version = body.get("v")
    if version != ADMIN_SCHEMA:
        raise AdminError(f"admin {kind} of schema version {describe(version)}: "
                         f"this edgeq understands version {ADMIN_SCHEMA} only; upgrade the older side")
    if body.get("type") != f"admin-{kind}":
        raise AdminError(
            f"malformed admin {kind}: its type is {describe(body.get('type'))}, not 'admin-{kind}'"
        )
    unknown = sorted(str(k) for k in body if k not in keys)
    if unknown:
        raise AdminError(f"malformed admin {kind}: unknown field(s) {describe(', '.join(unknown))} in "
                         f"schema version {ADMIN_SCHEMA}")
    missing = sorted(k for k in keys if k not in body)
    if missing:
        raise AdminError(f"malformed admin {kind}: missing field(s) {', '.join(missing)}")
    return body


# -- the request --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdminRequest:
    """One admin request; each field's meaning: docs/admin.md, 'The request'."""

    request_id: str
    action: str
    target: str | None
    params: Mapping[str, object]
    device: str
    reply_qmgr: str
    reply_queue: str
    created_ms: int
    expires_ms: int | None
    key_id: str
    signature: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not _REQUEST_ID.fullmatch(self.request_id):
            raise InvalidArgument(f"request_id {describe(self.request_id)} is not 16 to 64 lowercase "
                                  "hex digits (an even count): make one with new_request_id()")
        if self.action not in ACTIONS:
            raise InvalidArgument(
                f"unknown admin action {describe(self.action)}: use one of {', '.join(ACTIONS)}"
            )
        if self.target is not None:
            check_name(self.target, "target queue name")
        object.__setattr__(
            self, "params", MappingProxyType(_plain_map(self.params, "params", 1, floats=False))
        )
        check_name(self.device, "device (queue manager) name")
        check_name(self.reply_qmgr, "reply queue manager name")
        check_name(self.reply_queue, "reply queue name")
        _int(self.created_ms, "created_ms")
        if self.expires_ms is not None:
            _int(self.expires_ms, "expires_ms", low=1)
        check_key_id(self.key_id)
        if not isinstance(self.signature, (bytes, bytearray)) or len(self.signature) not in (0, 64):
            raise InvalidArgument(
                "signature must be empty (unsigned) or the 64 bytes of an Ed25519 signature"
            )
        object.__setattr__(self, "signature", bytes(self.signature))

    @classmethod
    def create(
        cls, action: str, target: str | None = None, params: Mapping[str, object] | None = None, *,
        device: str, reply_qmgr: str, created_ms: int, key_id: str, reply_queue: str = ADMIN_REPLY_QUEUE,
        expires_ms: int | None = None,
    ) -> AdminRequest:
        """A new unsigned request with a fresh id; sign it with :meth:`sign`."""
        return cls(new_request_id(), action, target, params or {}, device, reply_qmgr, reply_queue,
                   created_ms, expires_ms, key_id)

    def _fields(self) -> dict[str, object]:
        return {
            "v": ADMIN_SCHEMA, "type": "admin-request", "id": self.request_id, "action": self.action,
            "target": self.target, "params": as_python(self.params), "device": self.device,
            "reply_qmgr": self.reply_qmgr, "reply_queue": self.reply_queue, "created_ms": self.created_ms,
            "expires_ms": self.expires_ms, "key_id": self.key_id,
        }

    def signed_bytes(self) -> bytes:
        """What the operator signs: canonical CBOR of every field but the signature."""
        return cbor2.dumps(self._fields(), canonical=True)

    def sign(self, private_key: Ed25519PrivateKey) -> AdminRequest:
        """This request signed with ``private_key`` (the operator key ``key_id`` names)."""
        if not isinstance(private_key, Ed25519PrivateKey):
            raise InvalidType(f"sign needs an Ed25519PrivateKey, not {type(private_key).__name__}")
        return replace(self, signature=private_key.sign(self.signed_bytes()))

    def verify(self, public_key: Ed25519PublicKey | bytes) -> bool:
        """Whether the signature is ``public_key``'s over :meth:`signed_bytes` (False if unsigned)."""
        if not self.signature:
            return False
        try:
            key = (
                public_key if isinstance(public_key, Ed25519PublicKey)
                else Ed25519PublicKey.from_public_bytes(raw_public_key(public_key))
            )
            key.verify(self.signature, self.signed_bytes())
        except (InvalidSignature, ValueError):  # ValueError: bytes that are no public key verify nothing
            return False
        return True

    def replace_params(self, **params: object) -> AdminRequest:
        """A copy with ``params`` merged in (and the signature kept: it no longer verifies)."""
        return replace(self, params={**self.params, **params})

    def to_bytes(self) -> bytes:
        """The request as it travels (canonical CBOR, with the signature)."""
        data = cbor2.dumps({**self._fields(), "sig": self.signature}, canonical=True)
        if len(data) > MAX_REQUEST_BYTES:
            raise InvalidArgument(f"the request encodes to {len(data)} bytes, "
                                  f"more than the {MAX_REQUEST_BYTES} a device accepts: send smaller params")
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> AdminRequest:
        """Decode a request (bounded, every field checked), or :class:`AdminError`; the
        signature is checked by :meth:`verify`, not here."""
        body = _decode(data, "request", MAX_REQUEST_BYTES, _REQUEST_LIMITS, _REQUEST_KEYS)
        try:
            sig = body["sig"]
            if not isinstance(sig, bytes):
                raise InvalidType(f"sig must be bytes, not {describe(sig)}")
            for key in ("id", "action", "device", "reply_qmgr", "reply_queue", "key_id"):
                _text(body[key], key)
            target = body["target"]
            if target is not None:
                _text(target, "target")
            return cls(body["id"], body["action"], target, body["params"], body["device"], body["reply_qmgr"],
                       body["reply_queue"], body["created_ms"], body["expires_ms"], body["key_id"], sig)
        except EdgeqError as exc:
            raise AdminError(f"malformed admin request: {exc}") from exc


# -- the reply ----------------------------------------------------------------------------------


def overall_rc(items: Iterable[Mapping[str, object]]) -> ReplyRC:
    """A reply's rc from its items': success if none failed, failed if all did, mixed otherwise."""
    rcs = {item.get("rc") for item in items}
    if "failed" not in rcs:
        return "success"
    return "failed" if rcs == {"failed"} else "mixed"


def _item(value: object, index: int) -> Mapping[str, object]:
    item = _plain_map(value, f"results[{index}]", 2, floats=True)
    if item.get("rc") not in ("success", "failed"):
        raise InvalidArgument(
            f"results[{index}] rc must be 'success' or 'failed', not {describe(item.get('rc'))}"
        )
    for key in ("object", "reason"):
        if item.get(key) is not None and not isinstance(item.get(key), str):
            raise InvalidType(f"results[{index}] {key} must be text or null, not {describe(item.get(key))}")
    item.setdefault("object", None)
    item.setdefault("reason", None)
    return MappingProxyType(item)


@dataclass(frozen=True)
class AdminReply:
    """A device's answer to one request; each field's meaning: docs/admin.md, 'The reply'."""

    request_id: str
    device: str
    rc: ReplyRC
    results: tuple[Mapping[str, object], ...]
    message: str
    executed_ms: int

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or (
            self.request_id and not _REQUEST_ID.fullmatch(self.request_id)
        ):
            raise InvalidArgument(f"reply request_id {describe(self.request_id)} is not a request id (or '')")
        check_name(self.device, "device (queue manager) name")
        if self.rc not in get_args(ReplyRC):
            raise InvalidArgument(f"rc must be 'success', 'failed' or 'mixed', not {describe(self.rc)}")
        if isinstance(self.results, (str, bytes, Mapping)) or not isinstance(self.results, Iterable):
            raise InvalidType("results must be a sequence of maps")
        object.__setattr__(self, "results", tuple(_item(r, i) for i, r in enumerate(self.results)))
        _text(self.message, "message")
        _int(self.executed_ms, "executed_ms")

    @property
    def ok(self) -> bool:
        return self.rc == "success"

    def to_bytes(self) -> bytes:
        """The reply as it travels (CBOR); :class:`AdminError` past :data:`MAX_REPLY_BYTES`."""
        data = cbor2.dumps({
            "v": ADMIN_SCHEMA, "type": "admin-reply", "id": self.request_id, "device": self.device,
            "rc": self.rc, "results": [as_python(r) for r in self.results], "message": self.message,
            "executed_ms": self.executed_ms,
        }, canonical=True)
        if len(data) > MAX_REPLY_BYTES:
            raise AdminError(
                f"the reply encodes to {len(data)} bytes, more than the {MAX_REPLY_BYTES} allowed"
            )
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> AdminReply:
        """Decode a reply (bounded, every field checked); :class:`AdminError` if it is not one."""
        body = _decode(data, "reply", MAX_REPLY_BYTES, _REPLY_LIMITS, _REPLY_KEYS)
        try:
            results = body["results"]
            if not isinstance(results, list):
                raise InvalidType(f"results must be a list, not {describe(results)}")
            for key in ("id", "device", "rc"):
                _text(body[key], key)
            return cls(
                body["id"], body["device"], body["rc"], tuple(results), body["message"], body["executed_ms"]
            )
        except EdgeqError as exc:
            raise AdminError(f"malformed admin reply: {exc}") from exc


# -- as messages --------------------------------------------------------------------------------


def request_message(request: AdminRequest) -> Message:
    """The message that carries ``request`` to a device's admin queue: correlation id the request
    id's bytes, and its ``expires_ms`` as an absolute expiry."""
    return Message(
        request.to_bytes(), correlation_id=bytes.fromhex(request.request_id),
        expiry=None if request.expires_ms is None else Int64(request.expires_ms),
    )


def reply_message(reply: AdminReply, uid: MessageUID | None = None) -> Message:
    """The message that carries ``reply`` to its reply queue; a device gives each request's reply
    one ``uid``, so a reply put again after a crash is a duplicate."""
    return Message(
        reply.to_bytes(), correlation_id=bytes.fromhex(reply.request_id) if reply.request_id else None,
        uid=uid, created_ms=reply.executed_ms if uid is not None else None,
    )
