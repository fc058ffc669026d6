"""Human names for libraries, cases and sizes (no library is imported here)."""

from __future__ import annotations

__all__ = ["LIB_LABELS", "case_title", "human", "lib_label"]

LIB_LABELS = {
    "edgeq": "edgeq",
    "pq-ack": "persist-queue SQLiteAckQueue",
    "pq-queue": "persist-queue SQLiteQueue",
    "litequeue": "litequeue",
    "raw-sqlite": "raw sqlite3",
    "edgeq-sql": "edgeq's SQL alone (its statements and schema, no edgeq Python)",
    "mqtt": "MQTT QoS 2 (paho-mqtt → mosquitto, snapshot after every change)",
    "mqtt-periodic": "MQTT QoS 2 (paho-mqtt → mosquitto, default 30-min snapshot)",
}

_RAW_BY_CASE = {
    "put_single": "raw sqlite3 (1 row/txn)",
    "put_batch": "raw sqlite3 (1 txn)",
    "get_confirm": "raw sqlite3 (lock txn + delete txn)",
    "drain": "raw sqlite3 (lock txn + delete txn)",
    "depth": "raw sqlite3 count(*)",
    "expiry": "raw sqlite3 (1 DELETE)",
    "check": "raw sqlite3 PRAGMA integrity_check",
}

#: How each library is shared by the threads of the thread-scaling cases.
_THREADED = {
    "pq-ack": "persist-queue SQLiteAckQueue (multithreading=True)",
    "litequeue": "litequeue (a LiteQueue per thread)",
    "raw-sqlite": "raw sqlite3 (a connection per thread, 1 row/txn)",
}
_THREADED_RAW = {"get_confirm_threads": "raw sqlite3 (a connection per thread, lock txn + delete txn)"}

_PQ_QUEUE_BY_CASE = {
    "wakeup_same": "persist-queue SQLiteQueue get(block=True)",
    "wakeup_other": "persist-queue SQLiteQueue get(block=True)",
    "idle_wait": "persist-queue SQLiteQueue get(block=True)",
    "drain": "persist-queue SQLiteQueue (get deletes, no confirm)",
    "memory": "persist-queue SQLiteQueue (get deletes, no confirm)",
}


#: The variants of edgeq (and MQTT) the wire, TLS and fleet cases measure.
_VARIANTS_BY_CASE = {
    "bridge_in": {
        "edgeq-mqtt-in": "edgeq mqtt-in bridge (QoS 1)",
        "paho-consume": "paho consuming the session (QoS 1)",
        "paho-publish": "paho publishing (QoS 1)",
        "edgeq-jetstream-in": "edgeq jetstream-in bridge",
        "nats-py-consume": "nats-py pull consumer (fetch, ack each)",
        "nats-py-publish": "nats-py publishing (PubAck each)",
    },
    "import": {
        "edgeq": "edgeq (from edgeq import QueueManager)",
        "edgeq-package": "edgeq (import edgeq alone)",
    },
    "cli_start": {
        "edgeq": "edgeq --version",
        "edgeq-put": "edgeq put Q text",
        "edgeq-import": "python -c 'import edgeq'",
    },
    "wire_bytes": {
        "edgeq": "edgeq, no compression (signed)",
        "edgeq-zlib": "edgeq, zlib (signed)",
        "edgeq-zstd": "edgeq, zstd (signed)",
        "mqtt": "MQTT QoS 2 (paho-mqtt → mosquitto)",
    },
    "sync_secure": {
        "edgeq": "edgeq, unsigned, plain HTTP",
        "edgeq-signed": "edgeq, signed, plain HTTP",
        "edgeq-tls": "edgeq, unsigned, HTTPS",
        "edgeq-signed-tls": "edgeq, signed, HTTPS",
    },
    "fleet": {"edgeq": "edgeq serve, signed devices"},
    "bridge_out": {
        "edgeq-mqtt-out": "edgeq mqtt-out bridge, QoS 1 → mosquitto",
        "paho-qos1": "paho-mqtt publishing at QoS 1 → mosquitto (20 in flight)",
        "edgeq-jetstream-out": "edgeq jetstream-out bridge → JetStream",
        "nats-py": "nats-py js.publish, all at once, PubAcks awaited",
        "nats-py-awaited": "nats-py js.publish, each awaited",
    },
    "rule_cost": {"edgeq": "edgeq, no rule", "edgeq-counters": "edgeq, counters rule bound"},
    "aio_puts": {
        "edgeq": "edgeq AsyncQueueManager (32 worker threads)",
        "edgeq-1-worker": "edgeq AsyncQueueManager, 1 worker thread (no flush to share)",
    },
}


def lib_label(lib: str, case: str) -> str:
    """The label of ``lib`` in the row of ``case``."""
    if lib in _VARIANTS_BY_CASE.get(case, {}):
        return _VARIANTS_BY_CASE[case][lib]
    if case in ("put_threads", "put_threads_slowsync", "get_confirm_threads"):
        if lib == "raw-sqlite" and case in _THREADED_RAW:
            return _THREADED_RAW[case]
        return _THREADED.get(lib, LIB_LABELS.get(lib, lib))
    if lib == "raw-sqlite" and case in _RAW_BY_CASE:
        return _RAW_BY_CASE[case]
    if lib == "pq-queue" and case in _PQ_QUEUE_BY_CASE:
        return _PQ_QUEUE_BY_CASE[case]
    return LIB_LABELS.get(lib, lib)


def human(n: int | float | None) -> str:
    """A compact count: 1k, 40k, 1M, 1.002M.

    >>> human(1_000), human(40_000), human(1_000_000), human(1_002_000), human(200)
    ('1k', '40k', '1M', '1.002M', '200')
    """
    if n is None:
        return ""
    n = int(n)
    for unit, scale in (("M", 1_000_000), ("k", 1_000)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return str(n)


def case_title(case: str, size: int | None, extra: dict[str, float] | None = None) -> str:
    """The title of a case row."""
    extra = extra or {}
    titles = {
        "import": "import time (fresh interpreter)",
        "cli_start": "command-line start (whole process, bytecode cached)",
        "put_single": "single durable put",
        "put_batch": f"batch put ({human(extra.get('batch_size'))} msgs/txn)",
        "get_confirm": f"get+confirm @ {human(size)} backlog",
        "put_threads": f"durable single puts, {size} thread{'s' if size != 1 else ''}",
        "put_threads_slowsync": f"durable single puts, {size} thread{'s' if size != 1 else ''}, "
                                f"slowsync shim on: every flush +{extra.get('slowsync_us', 0):,.0f} µs",
        "aio_puts": f"asyncio durable puts, {size} coroutine{'s' if size != 1 else ''}",
        "rule_cost": "a bound rule's cost: durable single puts" if size == 1 else
                     f"a bound rule's cost: put_many of {human(size)}",
        "get_confirm_threads": f"get+confirm, {size} consumer thread{'s' if size != 1 else ''}",
        "drain": f"drain: {int(extra.get('per_consumer', 4))} processes, {human(size)} msgs",
        "depth": f"depth inquiry @ {human(size)}",
        "expiry": f"discard {human(size)} expired",
        "check": f"edgeq check of {human(size)} msgs",
        "memory": f"peak RSS holding {human(size)}",
        "sync": (f"sync device → server, {human(size)} msgs, loopback"
                 + (f" (batches of {human(extra['batch_size'])})" if extra.get("batch_size") else "")),
        "wakeup_same": "waiting get woken by a put, same process",
        "wakeup_other": "waiting get woken by a put, other process",
        "idle_wait": f"CPU of a get waiting {extra.get('wall_s', 0):.0f} s on an empty queue",
        "sync_secure": f"sync device → server, {human(size)} msgs: signed and TLS beside plain",
        "wire_bytes": (f"bytes on the wire per message, batches of {size}" if size is not None else
                       "bytes on the wire per message (MQTT: a PUBLISH each)"),
        "fleet": f"{size} devices pushing at once, loopback",
        "bridge_out": f"queue → broker, {human(size)} msgs, loopback",
        "bridge_in": f"in-bridges: broker → queue, a backlog of {human(size)}, loopback",
    }
    return titles.get(case, case)
