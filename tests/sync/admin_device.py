"""A device for the admin end-to-end test: one real sync agent in its own process, its clock
the machine's plus an offset the test moves, driven over stdin/stdout.

    python tests/sync/admin_device.py --db DEV1.db --server URL --key dev1.key

Prints ``ready`` once its agent exists, then answers each line on stdin with one line:

* ``sync``: one cycle (push, pull, the admin requests executed, their replies pushed),
  answered with its report as JSON;
* ``advance MS``: the device's clock moves on ``MS`` milliseconds (``ok``): what was put
  with an expiry expires here, as on a device left running;
* ``start SECONDS`` / ``stop``: run the agent's daemon (a cycle every SECONDS) / stop it;
* ``quit`` (or the end of stdin): close the agent and the store.

A long-lived process matters here: a queue is activated (expired messages discarded at
check point ``activate``) at its first use after its store opens, so only a process that
lives on sees messages expire later at ``depth`` or ``delete``, as MQe's seed describes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edgeq import QueueManager
from edgeq.clock import system_clock
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.keys import load_private_key


class OffsetClock:
    """The machine's clock plus an offset (epoch ms)."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return system_clock() + self.offset_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="admin_device.py")
    parser.add_argument("--db", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--key", required=True, help="the device's signing key (edgeq keys new)")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each answer leaves at once
    clock = OffsetClock()
    qm = QueueManager(args.db, journal="device", clock=clock)
    # Requests are signed on the machine's clock (the server checks their skew); the agent
    # and the store keep the device's.
    agent = SyncAgent(qm, args.server, clock=clock, timeout=30,
                      auth=DeviceSigner(qm.name, load_private_key(Path(args.key))))
    try:
        print("ready")
        for line in sys.stdin:
            command, _, arg = line.strip().partition(" ")
            if command == "quit":
                break
            if command == "sync":
                pushed, pulled = agent.sync_once()
                print(json.dumps({
                    "pushed": {"transmitted": pushed.transmitted, "error": pushed.error,
                               "stopped": pushed.stopped},
                    "pulled": (None if pulled is None
                               else {"received": pulled.received, "error": pulled.error}),
                }))
            elif command == "advance":
                clock.offset_ms += int(arg)
                print("ok")
            elif command == "start":
                agent.start(float(arg))
                print("started")
            elif command == "stop":
                agent.stop()
                print("stopped")
            else:
                raise SystemExit(f"admin_device: unknown command {command!r}")
    finally:
        agent.close()
        qm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
