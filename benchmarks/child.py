"""Entry point of every child process: ``python -m benchmarks.child '<json spec>'``.

The spec names an ``action``; the child runs it and prints one line,
:data:`benchmarks.runner.RESULT_MARKER` followed by JSON. Only the module of
that action (and the one library it drives) is imported.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from benchmarks.peers.base import Unsupported

RESULT_MARKER = "BENCH-RESULT "

#: action -> "module:function"
ACTIONS = {
    "fill": "benchmarks.cases.fill:child_fill",
    "put_single": "benchmarks.cases.put_single:child_put_single",
    "put_batch": "benchmarks.cases.put_batch:child_put_batch",
    "get_confirm": "benchmarks.cases.get_confirm:child_get_confirm",
    "put_threads": "benchmarks.cases.put_threads:child_put_threads",
    "put_threads_slowsync": "benchmarks.cases.put_threads_slowsync:child_put_threads_slowsync",
    "aio_puts": "benchmarks.cases.aio_puts:child_aio_puts",
    "rule_cost": "benchmarks.cases.rule_cost:child_rule_cost",
    "get_confirm_threads": "benchmarks.cases.get_confirm_threads:child_get_confirm_threads",
    "depth": "benchmarks.cases.depth:child_depth",
    "expiry": "benchmarks.cases.expiry:child_expiry",
    "check": "benchmarks.cases.check:child_check",
    "memory": "benchmarks.cases.memory:child_memory",
    "drain_consumer": "benchmarks.cases.drain:child_consumer",
    "count": "benchmarks.cases.drain:child_count",
    "sync_setup": "benchmarks.cases.sync:child_setup",
    "sync_push": "benchmarks.cases.sync:child_push",
    "sync_verify": "benchmarks.cases.sync:child_verify",
    "wakeup_same": "benchmarks.cases.wakeup_same:child_wakeup_same",
    "wakeup_other": "benchmarks.cases.wakeup_other:child_wakeup_other",
    "wakeup_getter": "benchmarks.cases.wakeup_other:child_wakeup_getter",
    "wakeup_putter": "benchmarks.cases.wakeup_other:child_wakeup_putter",
    "idle_wait": "benchmarks.cases.idle_wait:child_idle_wait",
    "sync_secure_setup": "benchmarks.cases.sync_secure:child_setup",
    "wire_setup": "benchmarks.cases.wire_bytes:child_setup",
    "wire_push": "benchmarks.cases.wire_bytes:child_push",
    "wire_verify": "benchmarks.cases.wire_bytes:child_verify",
    "fleet_setup": "benchmarks.cases.fleet:child_setup",
    "fleet_devices": "benchmarks.cases.fleet:child_devices",
    "fleet_verify": "benchmarks.cases.fleet:child_verify",
    "bridge_out_setup": "benchmarks.cases.bridge_out:child_setup",
    "bridge_out_forward": "benchmarks.cases.bridge_out:child_forward",
    "bridge_out_client": "benchmarks.cases.bridge_out:child_client",
    "proxy": "benchmarks.proxy:child_proxy",
    "mqtt_subscribe": "benchmarks.peers.mqtt_peer:child_subscribe",
    "mqtt_publish": "benchmarks.peers.mqtt_peer:child_publish",
    "bridge_in_sessions": "benchmarks.cases.bridge_in:child_sessions",
    "bridge_in_paho": "benchmarks.cases.bridge_in:child_paho_consume",
    "bridge_in_edgeq": "benchmarks.cases.bridge_in:child_bridge",
    "nats_publish": "benchmarks.peers.nats_peer:child_publish",
    "nats_consume": "benchmarks.peers.nats_peer:child_consume",
}


def main(argv: list[str]) -> int:
    """Run the action described by ``argv[1]`` and print its result line."""
    spec: dict[str, Any] = json.loads(argv[1])
    module_name, func_name = ACTIONS[spec["action"]].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        out: dict[str, Any] = func(spec)
    except Unsupported as exc:
        out = {"status": "n/a", "note": str(exc)}
    print(RESULT_MARKER + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
