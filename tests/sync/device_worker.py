"""A device sync agent that lives across pushes, driven by a fault test over stdin/stdout.

    python tests/sync/device_worker.py --db device.db --server URL [--batch-size N] [--key device.key]

Prints ``ready`` once its agent exists, then for each ``push`` line on stdin runs
``SyncAgent.push_once`` and prints the report as one JSON line (flushed); ``quit``
or the end of stdin closes it. Unlike ``edgeq sync --once`` (a new agent per run,
which re-puts everything with ``resend``), one agent here sees many pushes, so
its in-process recovery is exercised: the uids it already tried, non-resend puts
after a complete push, a new hello after a failure, the uids the server expired.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edgeq import QueueManager
from edgeq.sync.agent.agent import SyncAgent


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="device_worker.py")
    parser.add_argument("--db", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--key", help="sign requests with this device key (edgeq keys new)")
    args = parser.parse_args(argv)
    auth = None
    if args.key:
        from edgeq.sync.agent.signer import DeviceSigner
        from edgeq.sync.keys import load_private_key

        auth = DeviceSigner("DEV1", load_private_key(Path(args.key)))
    qm = QueueManager(args.db, journal="device")
    agent = SyncAgent(qm, args.server, batch_size=args.batch_size, timeout=args.timeout, auth=auth)
    try:
        _say("ready")
        for line in sys.stdin:
            command = line.strip()
            if command == "quit":
                break
            if command != "push":
                raise SystemExit(f"device_worker: unknown command {command!r}")
            report = agent.push_once()
            _say(json.dumps({"pushed": {
                key: getattr(report, key) for key in (
                    "sent", "transmitted", "duplicates", "expired", "refused", "requeued", "batches",
                    "expiries_reported", "error")
            }}))
    finally:
        agent.close()
        qm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
