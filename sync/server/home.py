"""The home server's logic, free of HTTP: decoded request bodies in, response bodies out. Each
stage of a batch is one transaction, so a failure leaves nothing half done."""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from edgeq import __version__
from edgeq.admin.wire import ADMIN_QUEUE
from edgeq.clock import system_clock
from edgeq.errors import EdgeqError, QueueNotFound
from edgeq.manager import QueueManager
from edgeq.message import Message
from edgeq.names import check_origin, origin_qmgr
from edgeq.store.journal import remote_expiry_refusal
from edgeq.sync import expiryreports as xr
from edgeq.sync import messages as wm
from edgeq.sync import protocol as p
from edgeq.sync.protocol import device_queue_name  # the naming convention is the protocol's
from edgeq.sync.refusals import missing_hint, refusal_code
from edgeq.sync.server.admin.records import AdminRecords
from edgeq.sync.server.holds import HoldGate, HoldPolicy
from edgeq.sync.server.metrics import Metrics
from edgeq.sync.server.sessions import DeviceSessions, DeviceState
from edgeq.types import MAX_CONFIRM_ID, Clock
from edgeq.uid import MessageUID

__all__ = ["HomeService", "ServerLimits", "device_queue_name"]

log = logging.getLogger("edgeq.sync.server")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_BATCH = 5_000


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Limits the server enforces and announces in its hello."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_batch: int = DEFAULT_MAX_BATCH


class HomeService:
    """Serve the protocol's request bodies over ``qm``; a bad body raises ProtocolError."""

    def __init__(
        self,
        qm: QueueManager,
        *,
        limits: ServerLimits | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        sessions: DeviceSessions | None = None,
        holds: HoldPolicy | None = None,
    ) -> None:
        self.qm = qm
        self.limits = limits or ServerLimits()
        self.clock: Clock = clock or system_clock
        self.metrics = metrics or Metrics()
        self.sessions = sessions or DeviceSessions()
        self.holds = HoldGate(qm, holds or HoldPolicy())

    # -- helpers --------------------------------------------------------------------------

    def _device(self, body: Mapping[str, Any], *, hello: bool = False) -> tuple[DeviceState, int, int]:
        """The calling device (must have said hello unless this is one), its clock, ours."""
        name = p.req_name(body, "qmgr")
        sent = p.req_int(body, "now_ms", high=2**62)
        now = self.clock()
        state = self.sessions.device(name) if hello else self.sessions.current(name)
        if state is None:
            raise p.ProtocolError(
                "hello-required",
                f"this server has no clock offset for {name} "
                f"(it restarted, or {name} never said hello): send /v1/hello, then retry",
            )
        # The hello's offset stays as measured (metrics, the devices table, legacy puts):
        # expiries are rebased on the device's own bounds of this clock (``server_ms``).
        if state.seen(now) and not hello:  # a hello writes its own record
            self._contact(state, now)
        self._settle(name, body)
        return state, sent, now

    def _contact(self, state: DeviceState, now: int) -> None:
        """Write the device's last contact (``devices.last_seen_ms``) to the store."""
        self.qm.exchange.record_device(state.name)
        state.seen_stored(now)

    def _settle(self, device: str, body: Mapping[str, Any]) -> None:
        """Forget the confirmed uids below the device's low-water mark ``settled`` (docs/protocol.md,
        "Exactly once without a time window")."""
        origin = body.get("origin")
        below = p.opt_int(body, "settled")
        if origin is None or below is None:
            return  # an older agent: its uids are forgotten by age (remember_confirmed_ms)
        try:
            uid_origin = check_origin(origin, "origin")
        except EdgeqError as exc:
            raise p.ProtocolError("invalid", f"'origin': {exc}") from exc
        if origin_qmgr(uid_origin) != device:
            raise p.ProtocolError(
                "invalid",
                f"'origin' {uid_origin} is not a store of {device}: a device speaks only for itself")
        if self.sessions.settle_due(uid_origin, below):  # only a mark that moved costs a write
            self.qm.exchange.settle(uid_origin, below)
            self.sessions.settled(uid_origin, below)

    @staticmethod
    def _new_confirm_id() -> int:
        return secrets.randbelow(MAX_CONFIRM_ID) + 1

    # -- endpoints -------------------------------------------------------------------------

    def hello(self, body: Mapping[str, Any]) -> dict[str, Any]:
        p.expect(body, "hello")
        state, sent, now = self._device(body, hello=True)
        offset = state.said_hello(sent_ms=sent, now_ms=now, agent=body.get("agent"))
        # Stored the journal's way round: the device's clock minus ours.
        self.qm.exchange.record_device(state.name, clock_offset_ms=-offset, agent=state.agent)
        state.seen_stored(now)
        log.info(
            "hello from %s", state.name,
            extra={"event": "hello", "device": state.name, "clock_offset_ms": offset,
                   "agent": state.agent},
        )
        return {
            "type": "hello",
            "server": self.qm.name,
            "now_ms": now,
            "offset_ms": offset,
            "max_body_bytes": self.limits.max_body_bytes,
            "max_batch": self.limits.max_batch,
            "server_version": __version__,
            **self._store_seen(body),
        }

    def _store_seen(self, body: Mapping[str, Any]) -> dict[str, int]:
        """The settled mark and highest stamp seen of the hello's store: a restored store learns it is
        behind."""
        origin = body.get("origin")
        if not isinstance(origin, str) or p.opt_int(body, "settled") is None:
            return {}  # an older agent: it would not look
        settled, seen = self.qm.exchange.origin_seen(origin)
        return {key: value for key, value in (("settled", settled), ("seen", seen)) if value is not None}

    def _resent(self, device: str, uids: Collection[MessageUID]) -> set[MessageUID]:
        """The device's own uids below its store's settled mark: resends, never new messages."""
        own = [origin for origin in {uid.origin for uid in uids} if origin_qmgr(origin) == device]
        marks = self.qm.exchange.settled_marks(own) if own else {}
        if not any(marks.values()):
            return set()  # nothing settled, so nothing below it (per batch, not per uid)
        return {uid for uid in uids if uid.stamp < marks.get(uid.origin, 0)}

    def put(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Stage one: store the batch locked and invisible, one transaction."""
        p.expect(body, "put")
        state, sent, now = self._device(body)
        queue = p.req_name(body, "queue")
        wire = wm.decode_messages(body, "messages", max_len=self.limits.max_batch)
        # The device's lower bound of our clock when it read the remaining lifetimes
        # (absent from an older agent: the legacy transit from the hello's offset).
        server_ms = p.opt_int(body, "server_ms", high=2**62)
        base = wm.rebase_ms(now, server_ms=server_ms, sender_now_ms=sent,
                            offset_ms=state.clock_offset_ms)
        state.put_bounds(sent, server_ms)
        transit = now - base
        resent = self._resent(state.name, [w.uid for w in wire])
        fresh = [w for w in wire if w.uid not in resent] if resent else wire
        messages = [w.to_message(base) for w in fresh]
        started = time.perf_counter()
        try:
            # Expired holds undone and the device's quota checked first (over it: the
            # put is refused whole, 429 ``over-quota``, and nothing is stored).
            with self.holds.admit(state, queue, messages):
                outcome = (self.qm.put_each(queue, messages, confirm_id=self._new_confirm_id())
                           if messages else [])
            done = [wm.result(r.uid, r.status, r.detail if r.status == "refused" else None) for r in outcome]
        except QueueNotFound as exc:
            done = [wm.result(w.uid, "refused", f"no-queue: {exc}") for w in fresh]
        results = done  # in the order of ``fresh``, which is ``wire`` unless some were resent
        if resent:
            answered = {uid: wm.result(uid, "duplicate") for uid in resent}
            answered |= {w.uid: r for w, r in zip(fresh, done, strict=True)}
            results = [answered[w.uid] for w in wire]
        tally = Counter(r["s"] for r in results)
        self.metrics.count("received", tally["stored"] + tally["replaced"])
        self.metrics.count("duplicates", tally["duplicate"] + tally["unconfirmed"])
        self.metrics.count("expired_on_arrival", tally["expired"])
        self.metrics.count("refused", tally["refused"])
        if tally["refused"]:
            self._record_refusals(state.name, queue, results)
        self._backlog(state, queue, body, now)
        log.info(
            "put %d message(s) from %s to %s", len(wire), state.name, queue,
            extra={"event": "put", "device": state.name, "queue": queue, "count": len(wire),
                   "transit_ms": transit, "results": dict(tally), "resent": len(resent),
                   "ms": round((time.perf_counter() - started) * 1000, 2)},
        )
        return {"type": "put", "now_ms": self.clock(), "queue": queue, "results": results}

    def _backlog(self, state: DeviceState, queue: str, body: Mapping[str, Any], now: int) -> None:
        """Keep the backlog a put or confirm reports for ``queue`` (absent from an older agent), at most
        every 10 s per device and queue unless it reached or left 0 (``DeviceState.backlog_due``)."""
        backlog = p.opt_int(body, "backlog")
        if backlog is not None and state.backlog_due(queue, backlog, now):
            self.qm.exchange.record_backlog(state.name, queue, backlog)

    def _record_refusals(self, device: str, queue: str, results: list[dict[str, Any]]) -> None:
        """Record what this put refused, per reason (count, last text), for the operator to see."""
        refused: dict[str, tuple[int, str]] = {}
        for r in results:
            if r["s"] == "refused":
                why = str(r.get("why") or "refused")
                code = refusal_code(why)
                # the queue manager's advice is for a Python caller: said for the CLI
                if code == "no-queue":
                    why = f"no-queue: {missing_hint(self.qm.name, queue)}"
                refused[code] = (refused.get(code, (0, ""))[0] + 1, why)
        self.qm.exchange.record_refusals(device, queue, refused)

    def confirm(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Stage two: make the batch visible, one transaction."""
        p.expect(body, "confirm")
        state, _, now = self._device(body)
        queue = p.req_name(body, "queue")
        uids = p.req_uids(body, "uids", max_len=self.limits.max_batch)
        self._backlog(state, queue, body, now)
        results: list[dict[str, Any]]
        try:
            outcome = self.qm.confirm_put_each(
                queue, uids, device=state.name, clock_offset_ms=state.journal_offset_ms,
            ) if uids else []
            results = [wm.result(r.uid, r.status) for r in outcome]
        except QueueNotFound as exc:
            results = [wm.result(uid, "refused", f"no-queue: {exc}") for uid in uids]
        # Only a uid the store does not know can be one settled since: looked up for those alone.
        unknown = [uid for uid, r in zip(uids, results, strict=True) if r["s"] in ("unknown", "refused")]
        resent = self._resent(state.name, unknown) if unknown else set()
        if resent:  # settled by the device, so confirmed before: the device may delete its copy
            results = [wm.result(r["u"], "already")
                       if r["s"] in ("unknown", "refused") and uid in resent else r
                       for uid, r in zip(uids, results, strict=True)]
        tally = Counter(r["s"] for r in results)
        if tally["confirmed"] or tally["expired"]:
            self.holds.changed(state.name)  # it holds less: its next put is measured afresh
        self.metrics.count("confirmed", tally["confirmed"])
        self.metrics.count("expired_locked", tally["expired"])
        log.info(
            "confirm %d message(s) from %s on %s", len(uids), state.name, queue,
            extra={"event": "confirm", "device": state.name, "queue": queue, "count": len(uids),
                   "results": dict(tally)},
        )
        return {"type": "confirm", "now_ms": self.clock(), "queue": queue, "results": results}

    def expiries(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A device's expiries and dead-letterings join our journal, answered entry by entry; only a
        malformed body fails the whole request."""
        p.expect(body, "expiries")
        state, _, _ = self._device(body)
        items = xr.decode_expiry_items(body, "entries", max_len=self.limits.max_batch)
        entries = [i.entry for i in items if i.entry is not None]
        answers: list[tuple[p.ExpiryStatus, str | None]]
        if self.qm.journal_mode == "server":
            offset = None if state.clock_offset_ms is None else -state.clock_offset_ms
            outcome = self.qm.exchange.journal_remote_expiries_each(
                state.name, entries, clock_offset_ms=offset or 0)
            answers = [(r.status, r.detail or None) for r in outcome]
        else:
            answers = [
                ("ignored", None) if why is None else ("refused", why)
                for why in (remote_expiry_refusal(state.name, e) for e in entries)
            ]
        done = iter(answers)
        results: list[dict[str, Any]] = []
        dead_lettered = 0
        for item in items:
            status, why = next(done) if item.entry is not None else ("refused", item.why)
            results.append(wm.result(item.uid, status, why if status == "refused" else None))
            dead = item.entry is not None and item.entry.kind == "dead-lettered"
            dead_lettered += status == "recorded" and dead
        tally = Counter(r["s"] for r in results)
        recorded = tally["recorded"]
        self.metrics.count("device_expiries", recorded - dead_lettered)
        self.metrics.count("device_dead_lettered", dead_lettered)
        refused = [{"u": r["u"], "why": r["why"]} for r in results if r["s"] == "refused"]
        log.info(
            "%d expiry report(s) from %s", len(items), state.name,
            extra={"event": "expiries", "device": state.name, "count": len(items),
                   "recorded": recorded, "results": dict(tally), "refused": refused[:10]},
        )
        return {"type": "expiries", "now_ms": self.clock(), "recorded": recorded, "results": results}

    def pull(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Assured get, for a device's home-server queue: lock up to ``max`` messages."""
        p.expect(body, "pull")
        state, _, _ = self._device(body)
        queue = p.req_name(body, "queue")
        limit = p.req_int(body, "max", low=1, high=self.limits.max_batch)
        try:
            held = device_queue_name(state.name, queue)
        except ValueError as exc:
            raise p.ProtocolError("invalid", str(exc)) from exc
        try:
            # One puller per device queue: whatever an earlier pull locked and the
            # device never confirmed (lost response, crash) is offered again.
            released = self.qm.release_locks(held)
            # Read before the get: the remaining lifetimes are measured no earlier, so the
            # device never takes them as fresher than they are (docs/protocol.md).
            now = self.clock()
            got = self.qm.get_many(held, limit, confirm_id=self._new_confirm_id())
        except QueueNotFound:
            log.info("pull from %s: no queue %s", state.name, held,
                     extra={"event": "pull", "device": state.name, "queue": held, "count": 0,
                            "missing": True})
            return {"type": "pull", "now_ms": self.clock(), "queue": queue, "messages": [],
                    "more": False, "missing": True}
        if queue == ADMIN_QUEUE and got:
            self._handing_over(state.name, got, now)
        messages = [wm.WireMessage.from_message(m).to_wire() for m in got]
        self.metrics.count("pulled", len(messages))
        log.info(
            "pull %d message(s) by %s from %s", len(messages), state.name, held,
            extra={"event": "pull", "device": state.name, "queue": held, "count": len(messages),
                   "released": released},
        )
        return {"type": "pull", "now_ms": now, "queue": queue, "messages": messages,
                "more": len(got) == limit,
                # What this queue may still offer the device: it forgets the rest of what it remembers.
                "held": self.qm.exchange.held_low_water(held)}

    def _handing_over(self, device: str, got: list[Message], now: int) -> None:
        """Mark the admin requests this pull hands ``device`` as delivered, before the answer leaves
        (their outcome is unknown from then on: docs/admin.md)."""
        records = AdminRecords(str(self.qm.path))
        try:
            records.handed_over(device, [m.correlation_id.hex() for m in got if m.correlation_id], now)
        finally:
            records.close()

    def pull_confirm(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The device stored what it pulled: delete those messages here."""
        p.expect(body, "pull-confirm")
        state, _, _ = self._device(body)
        queue = p.req_name(body, "queue")
        uids = p.req_uids(body, "uids", max_len=self.limits.max_batch)
        try:
            held = device_queue_name(state.name, queue)
        except ValueError as exc:
            raise p.ProtocolError("invalid", str(exc)) from exc
        results: list[dict[str, Any]]
        try:
            results = [wm.result(r.uid, r.status)
                       for r in self.qm.confirm_get_each(held, uids)] if uids else []
        except QueueNotFound:
            results = [wm.result(uid, "unknown") for uid in uids]
        tally = Counter(r["s"] for r in results)
        self.metrics.count("pull_confirmed", tally["confirmed"])
        log.info(
            "pull-confirm %d message(s) by %s on %s", len(uids), state.name, held,
            extra={"event": "pull-confirm", "device": state.name, "queue": held, "count": len(uids),
                   "results": dict(tally)},
        )
        return {"type": "pull-confirm", "now_ms": self.clock(), "queue": queue, "results": results}
