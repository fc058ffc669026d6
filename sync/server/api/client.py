"""The management API's client: what the CLI's remote mode (``--server URL --token-file F``) asks of
``/api/v1``, read back as the records the local commands print (docs/cli.md, "Remote mode")."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import httpx

from edgeq.admin.wire import AdminReply
from edgeq.errors import EdgeqError
from edgeq.events.bindings import BindingInfo
from edgeq.exchange.holds import HeldGroup
from edgeq.message import Message
from edgeq.queues.attributes import QueueAttributes, QueueUsage
from edgeq.store.devices import DeviceRecord, DeviceRefusal
from edgeq.store.rules import FailureRow
from edgeq.sync.keys import loose_secret
from edgeq.sync.server.admin.records import AdminRecord
from edgeq.sync.server.api.paging import MAX_LIMIT
from edgeq.types import FieldValue
from edgeq.uid import MessageUID
from edgeq.values import Int32, Int64

__all__ = ["TOKEN_ENV", "ApiClient", "RemoteError", "RemoteQueue", "load_token"]

#: a queue as the API shows it: its attributes, usage and rule bindings
RemoteQueue = tuple[QueueAttributes, QueueUsage, list[BindingInfo]]

#: the environment variable holding a token, when no --token-file is given
TOKEN_ENV: Final = "EDGEQ_TOKEN"
#: how often a remote wait for admin replies asks again (seconds)
WAIT_POLL_S: Final = 0.2

_WHAT_TO_DO = {
    401: "check the token (--token-file or $EDGEQ_TOKEN): `edgeq server token list` on the server's host "
         "shows which are revoked",
    403: "this needs an operator's token (edgeq server token create --role operator)",
}


class RemoteError(EdgeqError):
    """The server refused a request (``status``: its HTTP status; 0 if it could not be reached)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def load_token(token_file: Path | None, environ: Mapping[str, str] = os.environ) -> str:
    """The token from ``token_file`` (refused if group or others may read it), else from $EDGEQ_TOKEN."""
    if token_file is None:
        text = environ.get(TOKEN_ENV, "").strip()
        if not text:
            raise RemoteError(0, f"no token: give --token-file F or set {TOKEN_ENV} "
                                 "(edgeq server token create, on the server's host)")
        return text
    try:
        loose = loose_secret(token_file, token_file.stat().st_mode)
        text = token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RemoteError(0, f"cannot read the token file {token_file}: {exc.strerror or exc}") from exc
    if loose is not None:
        raise RemoteError(0, f"the token file {loose}")
    if not text:
        raise RemoteError(0, f"the token file {token_file} is empty: write the text edgeq server token "
                             "create printed into it")
    return text


class ApiClient:
    """``/api/v1`` of the console at ``url`` (``http://host:8471``), with a token."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 30.0) -> None:
        base = url.rstrip("/").removesuffix("/api/v1")
        self.url = base
        self._http = httpx.Client(base_url=base + "/api/v1", timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, params: Mapping[str, str] | None = None,
              body: Mapping[str, Any] | None = None) -> Any:
        try:
            response = self._http.request(method, path, params=params, json=body)
        except httpx.HTTPError as exc:
            raise RemoteError(0, f"cannot reach the management API at {self.url}: {exc}; give the "
                                 "console's address (edgeq serve --console, --console-port)") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success and body is not None:
            return body
        said = body.get("error") if isinstance(body, dict) else None
        said = said or f"{response.reason_phrase}, not the management API's JSON"
        hint = _WHAT_TO_DO.get(response.status_code)
        raise RemoteError(response.status_code, f"{self.url} answered {response.status_code}: {said}"
                                                + (f"; {hint}" if hint else ""))

    def _pages(self, path: str, key: str, **params: str) -> Iterator[dict[str, Any]]:
        """Every item of a paged list, a page fetched as the one before is used up."""
        after: str | None = None
        while True:
            page = self._call("GET", path, {**params, "limit": str(MAX_LIMIT),
                                            **({} if after is None else {"after": after})})
            yield from page[key]
            if page["next"] is None:
                return
            after = str(page["next"])

    def _browse(self, path: str, limit: int | None, left: str | None = None) -> list[Message]:
        """The ready, unexpired messages of the queue at ``path`` in get order, whole (only those that left
        queue ``left``, a dead-letter queue's): what the local ``browse`` shows."""
        found: list[Message] = []
        for m in self._pages(path, "messages", order="get"):
            if limit is not None and len(found) >= limit:
                break
            if m["expired"] or (left is not None and (m["fields"] or {}).get("dlq.queue") != _text(left)):
                continue
            if m["truncated"]:
                try:
                    m = self._call("GET", f"{path}/{_part(m['uid'])}")
                except RemoteError as exc:
                    if exc.status == 404:  # got since
                        continue
                    raise
            found.append(_message(path, m))
        return found

    def browse(self, queue: str, limit: int | None) -> list[Message]:
        return self._browse(f"/queues/{_part(queue)}/messages", limit)

    def dlq_browse(self, left: str | None, limit: int | None) -> list[Message]:
        return self._browse("/dead-letters", limit, left)

    def devices(self) -> list[tuple[DeviceRecord, str | None]]:
        """The devices, each with its key's fingerprint (the API never shows the key)."""
        return [_device(d) for d in self._call("GET", "/devices")["devices"]]

    def revoke_device(self, name: str) -> tuple[bool, DeviceRecord]:
        """Revoke ``name``: whether it was revoked now (False: it was already), and the device."""
        body = self._call("POST", f"/devices/{_part(name)}/revoke")
        return bool(body["revoked"]), _device(body["device"])[0]

    def register_device(self, name: str, public_key: str, queues: Sequence[str] | None, *, share_key: bool,
                        replace: bool) -> list[str]:
        """Register ``name`` with ``public_key`` (a .pub file's text): the other devices sharing the key."""
        body = {"name": name, "public_key": public_key, "queues": None if queues is None else list(queues),
                "force": share_key, "replace": replace}
        return list(self._call("POST", "/devices", body=body)["shares_key_with"])

    def rekey_device(self, name: str, public_key: str, *, share_key: bool) -> list[str]:
        body = {"public_key": public_key, "force": share_key}
        return list(self._call("POST", f"/devices/{_part(name)}/key", body=body)["shares_key_with"])

    def set_device_queues(self, name: str, queues: Sequence[str] | None) -> None:
        wanted = None if queues is None else list(queues)
        self._call("PUT", f"/devices/{_part(name)}/queues", body={"queues": wanted})

    def send_admin_request(self, device: str, action: str, target: str | None, params: Mapping[str, object],
                           *, expires_in_ms: int | None) -> AdminRecord:
        """Have the server sign ``action`` for ``device`` with its operator key and queue it."""
        body = {"device": device, "action": action, "target": target, "params": dict(params),
                "expires_in_ms": expires_in_ms}
        return _admin_record(self._call("POST", "/admin-requests", body=body))

    def admin_request(self, request_id: str) -> AdminRecord:
        return _admin_record(self._call("GET", f"/admin-requests/{_part(request_id)}"))

    def resend_admin_request(self, request_id: str) -> AdminRecord:
        return _admin_record(self._call("POST", f"/admin-requests/{_part(request_id)}/resend"))

    def admin_requests(self, device: str | None, *, replied: bool) -> list[AdminRecord]:
        """Every replied (or unreplied) request (of ``device``), newest first."""
        wanted = {"status": "replied" if replied else "pending"}
        if device is not None:
            wanted["device"] = device
        return [_admin_record(r) for r in self._pages("/admin-requests", "admin_requests", **wanted)]

    def wait_admin_requests(self, request_ids: Sequence[str], timeout_s: float) -> list[AdminRecord]:
        """The requests once none is pending, or as they stand after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            records = [self.admin_request(r) for r in request_ids]
            left = deadline - time.monotonic()
            if left <= 0 or all(r.status(int(time.time() * 1000)) != "pending" for r in records):
                return records
            time.sleep(min(WAIT_POLL_S, left))

    def refusals(self, device: str | None) -> list[DeviceRefusal]:
        found = self._call("GET", "/refusals", {} if device is None else {"device": device})
        return [DeviceRefusal(**r) for r in found["refusals"]]

    def rule_failures(self, parked: bool | None) -> list[FailureRow]:
        wanted = {} if parked is None else {"parked": "true" if parked else "false"}
        return [FailureRow(**f) for f in self._pages("/rule-events", "rule_events", **wanted)]

    def queues(self) -> list[RemoteQueue]:
        return [_queue(q) for q in self._call("GET", "/queues")["queues"]]

    def queue(self, name: str) -> RemoteQueue:
        return _queue(self._call("GET", f"/queues/{_part(name)}"))

    def queue_stats(self, name: str) -> tuple[RemoteQueue, dict[str, int]]:
        """Queue ``name`` and its counters (those the counters and dead-letter rules keep)."""
        found = self._call("GET", f"/queues/{_part(name)}")
        return _queue(found), {str(k): int(v) for k, v in found["counters"].items()}

    def depth(self, queue: str) -> int:
        """How many messages ``queue`` holds, as the API counts them (expired ones not yet discarded too)."""
        return int(self._call("GET", f"/queues/{_part(queue)}")["depth"])

    def purge(self, queue: str) -> int:
        return int(self._call("POST", f"/queues/{_part(queue)}/purge")["purged"])

    def dead_letter_queue(self) -> str:
        return str(self._call("GET", "/dead-letters", {"limit": "1"})["queue"])

    def dlq_resend(self, uid: str) -> list[str]:
        return [str(u) for u in self._call("POST", f"/dead-letters/{_part(uid)}/resend")["resent"]]

    def dlq_delete(self, uid: str) -> int:
        return int(self._call("POST", f"/dead-letters/{_part(uid)}/delete")["deleted"])

    def held(self, device: str | None, older_than_ms: int | None) -> tuple[list[HeldGroup], int]:
        """The held puts (of ``device``; held at least ``older_than_ms``) and the server's time (epoch ms)."""
        asked = (("device", device), ("older_than_ms", older_than_ms))
        wanted = {k: str(v) for k, v in asked if v is not None}
        found = self._call("GET", "/held", wanted)
        return [HeldGroup(**g) for g in found["held"]], int(found["now_ms"])

    def clear_held(self, device: str | None, older_than_ms: int) -> dict[str, Any]:
        """Undo the held puts (of ``device``) held ``older_than_ms`` or longer: ``{"undone": N, ...}``."""
        body = {"device": device, "older_than_ms": older_than_ms}
        return dict(self._call("POST", "/held/clear", body=body))

    def retry_rule_event(self, event_id: int) -> dict[str, Any]:
        """Retry parked rule event ``event_id``'s deliveries: ``{"succeeded": N, "failing": [...], ...}``."""
        return dict(self._call("POST", f"/rule-events/{event_id}/retry"))


def _part(text: str) -> str:
    """A name or uid as one path segment (a '/' or '?' in what a user typed cannot reach another endpoint)."""
    return quote(text, safe=":")


#: the field types the API shows other than as their JSON value
_TYPED: Final[Mapping[str, Callable[[Any], FieldValue]]] = {"int32": Int32, "int64": Int64, "float": float,
                                                           "bytes": bytes.fromhex}


def _text(value: str) -> dict[str, Any]:
    """A str field as the API shows it."""
    return {"type": "str", "value": value}


def _field(f: dict[str, Any]) -> FieldValue:
    """A typed field from the API's JSON (bytes as hex; a float that is not finite as text)."""
    kind, value = f["type"], f["value"]
    typed = _TYPED.get(kind)
    return value if typed is None else typed(value)


def _message(path: str, m: dict[str, Any]) -> Message:
    """A message from the API's JSON, as ``browse`` prints it (its time left by this host's clock)."""
    if m["data_base64"] is None or m["fields"] is None:
        why = "is encrypted (the API never shows its data)" if m["encrypted"] else "is damaged or unreadable"
        raise RemoteError(0, f"message {m['uid']} at {path} {why}: browse it on the server's host with --db "
                             "(edgeq check repairs a damaged store)")
    expiry, deadline = m["expiry"], m["deadline_ms"]
    return Message(
        base64.b64decode(m["data_base64"]), fields={k: _field(v) for k, v in m["fields"].items()},
        priority=m["priority"], correlation_id=None if m["correlation_id"] is None else
        bytes.fromhex(m["correlation_id"]), reply_to=m["reply_to"], uid=MessageUID.parse(m["uid"]),
        expiry=None if expiry is None else Int32(expiry["relative_ms"]) if expiry["type"] == "int32"
        else Int64(expiry["at_ms"]), created_ms=m["created_ms"], backout_count=m["backout_count"],
        remaining_expiry_ms=None if deadline is None else max(deadline - int(time.time() * 1000), 0))


def _device(d: dict[str, Any]) -> tuple[DeviceRecord, str | None]:
    queues = None if d["queues"] is None else tuple(d["queues"])
    record = DeviceRecord(d["name"], d["added_ms"], d["last_seen_ms"], d["clock_offset_ms"], d["agent"],
                          None, queues, d["revoked_ms"])
    return record, d["public_key"]


def _admin_record(d: dict[str, Any]) -> AdminRecord:
    """A request as the API shows it (without its signed bytes: ``request`` is empty)."""
    r = d["reply"]
    reply = None if r is None else AdminReply(d["request_id"], d["device"], r["rc"], r["results"],
                                              r["message"], r["executed_ms"])
    return AdminRecord(d["request_id"], d["device"], d["action"], d["target"], d["created_ms"],
                       d["expires_ms"], d["replied_ms"], d["rc"], reply, b"", d["delivered_ms"],
                       in_flight=d["status"] == "unknown" and d["delivered_ms"] is None)


def _queue(q: dict[str, Any]) -> RemoteQueue:
    known = {f.name for f in fields(QueueAttributes)}  # the rest is usage, bindings, backlog
    attrs = QueueAttributes(**{k: v for k, v in q.items() if k in known})
    usage = QueueUsage(attrs.name, q["depth"], q["bytes"], attrs.max_depth, attrs.max_bytes, attrs.on_full)
    bindings = [BindingInfo(b["name"], b["config"], b["persisted"], b["error"]) for b in q["bindings"]]
    return attrs, usage, bindings
