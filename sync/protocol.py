"""The sync wire format, version 1: one CBOR map per body, with ``"v"`` and ``"type"``
(docs/protocol.md). Pure (no HTTP), so both ends share it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias, get_args

import cbor2

from edgeq.encoding.cbor import DEFAULT_LIMITS, DecodeLimits, MalformedBody, describe, loads
from edgeq.errors import EdgeqError
from edgeq.store.journal import RemoteExpiryStatus
from edgeq.types import (
    MAX_INT64,
    MAX_STAMP,
    ConfirmStatus,
    PutStatus,
)
from edgeq.uid import MessageUID

__all__ = [
    "CONTENT_TYPE",
    "EXPIRY_STATUSES",
    "MAX_REMAINING_MS",
    "PROTOCOL_VERSION",
    "PULL_CONFIRM_STATUSES",
    "SUPPORTED_VERSIONS",
    "ConfirmStatus",
    "ErrorCode",
    "ExpiryStatus",
    "ProtocolError",
    "PullConfirmStatus",
    "PutStatus",
    "body_limits",
    "decode_body",
    "decode_uid",
    "device_queue_name",
    "encode_body",
    "error_body",
    "expect",
    "opt_int",
    "parse_uids",
    "req_int",
    "req_list",
    "req_name",
    "req_str",
]

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = frozenset({1})
CONTENT_TYPE: Final = "application/cbor"
#: Far beyond any useful expiry, and safe to add to an epoch ms.
MAX_REMAINING_MS: Final = 2**62

PATH_HELLO: Final = "/v1/hello"
PATH_PUT: Final = "/v1/put"
PATH_CONFIRM: Final = "/v1/confirm"
PATH_PULL: Final = "/v1/pull"
PATH_PULL_CONFIRM: Final = "/v1/pull/confirm"
PATH_EXPIRIES: Final = "/v1/expiries"

# PutStatus and ConfirmStatus are edgeq.types' (re-exported, not redefined).

#: Per-uid results of a pull confirm.
PullConfirmStatus: TypeAlias = Literal["confirmed", "unknown", "expired"]
PULL_CONFIRM_STATUSES: Final[tuple[str, ...]] = get_args(PullConfirmStatus)
#: Per-entry results of an expiry report (``ignored``: this server keeps no journal); each
#: one is an answer: the device trims its outbox.
ExpiryStatus: TypeAlias = Literal[RemoteExpiryStatus, "ignored"]
EXPIRY_STATUSES: Final[tuple[str, ...]] = get_args(ExpiryStatus)

ErrorCode: TypeAlias = Literal[
    "malformed",
    "unsupported-version",
    "unsupported-media-type",
    "too-large",
    "invalid",
    "hello-required",
    "unauthorized",
    "forbidden",
    "over-quota",
    "busy",
    "internal",
    "not-found",
    "method-not-allowed",
]

#: The HTTP status each error code is sent with.
HTTP_STATUS: Final[Mapping[str, int]] = {
    "malformed": 400,
    "unsupported-version": 400,
    "unsupported-media-type": 415,
    "too-large": 413,
    "invalid": 422,
    "hello-required": 428,
    "unauthorized": 401,
    "forbidden": 403,
    "over-quota": 429,  # a device's unconfirmed puts at its quota: the agent retries later
    "busy": 503,
    "internal": 500,
    "not-found": 404,
    "method-not-allowed": 405,
}


class ProtocolError(EdgeqError):
    """A request or response that breaks the protocol; ``code`` is the wire error code."""

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code: ErrorCode = code
        self.detail = detail

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]


def _invalid(detail: str) -> ProtocolError:
    return ProtocolError("invalid", detail)


# -- bodies ----------------------------------------------------------------------------


def encode_body(body: Mapping[str, Any]) -> bytes:
    """One CBOR map, stamped with the protocol version (``"v"``)."""
    return cbor2.dumps({"v": PROTOCOL_VERSION, **body})


#: Data items one message of a full batch may take on average: fixed keys and values at most
#: 19, each field 4 (its name, ``[code, value]``).
ITEMS_PER_MESSAGE: Final = 32
#: Arrays and maps one message may take on average: its map, its fields' map, an array a field.
CONTAINERS_PER_MESSAGE: Final = 8
#: Items, entries and nesting a body needs besides its batch (the deepest body is 5 levels).
BODY_ITEMS: Final = 1_024
BODY_DEPTH: Final = 8


def body_limits(max_batch: int) -> DecodeLimits:
    """What a request body may cost to decode on a server taking batches of ``max_batch``.

    >>> body_limits(5_000)
    DecodeLimits(max_depth=8, max_items=161024, max_length=5000, max_containers=41024)
    """
    return DecodeLimits(max_depth=BODY_DEPTH, max_items=max_batch * ITEMS_PER_MESSAGE + BODY_ITEMS,
                        max_length=max(max_batch, BODY_ITEMS),
                        max_containers=max_batch * CONTAINERS_PER_MESSAGE + BODY_ITEMS)


def decode_body(raw: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Decode one CBOR map of a supported version within ``limits``, or raise
    :class:`ProtocolError` ``malformed`` or ``unsupported-version``."""
    try:
        value = loads(raw, limits)
    except MalformedBody as exc:
        raise ProtocolError("malformed", str(exc)) from exc
    if not isinstance(value, dict):
        raise ProtocolError("malformed", f"body must be a CBOR map, not {type(value).__name__}")
    version = value.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ProtocolError(
            "unsupported-version", f"body has no protocol version 'v' (this end speaks {PROTOCOL_VERSION})"
        )
    if version not in SUPPORTED_VERSIONS:
        raise ProtocolError(
            "unsupported-version",
            f"protocol version {version} is not supported (this end speaks {sorted(SUPPORTED_VERSIONS)}): "
            "upgrade the older end",
        )
    return value


def error_body(code: ErrorCode, detail: str) -> bytes:
    """The body of an error response."""
    return encode_body(
        {"type": "error", "code": code, "detail": detail, "supported": sorted(SUPPORTED_VERSIONS)}
    )


# -- field checks (raise ProtocolError "invalid") ------------------------------------------


def expect(body: Mapping[str, Any], kind: str) -> None:
    """Check the body's ``type``."""
    got = body.get("type")
    if got != kind:
        raise _invalid(f"expected a {kind!r} body, got type {describe(got)}")


def req_int(body: Mapping[str, Any], key: str, *, low: int = 0, high: int = MAX_INT64) -> int:
    """The integer ``body[key]``, checked to be in ``low .. high`` (a bool is refused)."""
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"{key!r} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise _invalid(f"{key!r} = {describe(value)} is out of range {low} .. {high}")
    return value


def opt_int(body: Mapping[str, Any], key: str, *, low: int = 0, high: int = MAX_INT64) -> int | None:
    """Like :func:`req_int`, but None if ``key`` is missing or null."""
    return None if body.get(key) is None else req_int(body, key, low=low, high=high)


def req_str(body: Mapping[str, Any], key: str, *, max_len: int = 1024) -> str:
    """The string ``body[key]``, non-empty and at most ``max_len`` characters."""
    value = body.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= max_len:
        raise _invalid(f"{key!r} must be a non-empty string of at most {max_len} characters")
    return value


def req_name(body: Mapping[str, Any], key: str) -> str:
    """A queue or queue manager name (1-48 of ``A-Za-z0-9._-``)."""
    from edgeq.names import check_name

    value = req_str(body, key, max_len=48)
    try:
        check_name(value, key)
    except EdgeqError as exc:
        raise _invalid(str(exc)) from exc
    return value


def req_list(body: Mapping[str, Any], key: str, *, max_len: int) -> list[Any]:
    """The array ``body[key]``, of at most ``max_len`` items."""
    value = body.get(key)
    if not isinstance(value, list):
        raise _invalid(f"{key!r} must be an array, not {type(value).__name__}")
    if len(value) > max_len:
        raise _invalid(f"{key!r} holds {len(value)} items; at most {max_len} per request")
    return value


def req_uids(body: Mapping[str, Any], key: str, *, max_len: int) -> list[MessageUID]:
    """The array ``body[key]`` of ``ORIGIN.STAMP`` uid strings, parsed (at most ``max_len``)."""
    return parse_uids(req_list(body, key, max_len=max_len))


def parse_uids(values: Iterable[object]) -> list[MessageUID]:
    """Uid strings parsed (:func:`decode_uid`), each distinct origin checked once."""
    origins: set[str] = set()
    return [decode_uid(value, origins) for value in values]


def decode_uid(value: object, origins: set[str] | None = None) -> MessageUID:
    """A uid string ``ORIGIN.STAMP`` parsed, or ``invalid``. ``origins``: those a batch has checked
    already (a batch has few), so each is checked once; the uids parsed here add theirs."""
    if origins and type(value) is str and len(value) <= 85:
        origin, _, stamp = value.rpartition(".")
        if origin in origins and stamp.isdigit() and stamp.isascii() and 0 < (n := int(stamp)) <= MAX_STAMP:
            return MessageUID._trusted(origin, n)
    uid = _parse_uid(value)
    if origins is not None:
        origins.add(uid.origin)
    return uid


def _parse_uid(value: object) -> MessageUID:
    if not isinstance(value, str):
        raise _invalid(f"a uid must be a string ORIGIN.STAMP, not {type(value).__name__}")
    if len(value) > 85:  # origin (48 + ':' + 16) '.' stamp (19 digits): parsing more could not succeed
        raise _invalid(f"uid {describe(value)} is not a message uid: {len(value)} characters, at most 85")
    try:
        return MessageUID.parse(value)
    except EdgeqError as exc:
        raise _invalid(str(exc)) from exc


# -- naming ------------------------------------------------------------------------------------


def device_queue_name(device: str, queue: str) -> str:
    """Where the server holds messages for home-server queue ``queue`` of ``device``: ``<device>.<queue>``."""
    from edgeq.names import check_name

    name = f"{device}.{queue}"
    check_name(name, "device queue name")
    return name
