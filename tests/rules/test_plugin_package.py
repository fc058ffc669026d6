"""A rule plugin from its own package, installed by pip, found by name, fires on every event."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import sys
from edgeq import QueueManager, Message, Int32, Int64, ManualClock
from edgeq.errors import DuplicateMessage
from edgeq.rules.registry import installed_rules

db, log = sys.argv[1:3]
info = {r.name: r for r in installed_rules()}["audit-trail"]
print(info.package, "|", info.summary)
clock = ManualClock(1_763_683_200_000)
qm = QueueManager(db, name="DEV1", clock=clock)
qm.define_queue("Q", depth_threshold=2, ordering="fifo", rules=[("audit-trail", {"path": log})],
                redelivery_delay_ms=0)                   # an undone get: back at once
qm.put("Q", Message(b"late", expiry=Int64(1)))           # where=add: expired before it arrived
qm.put("Q", Message(b"ahead", expiry=Int32(1)))
qm.put("Q", Message(b"keep"))                             # depth 2: threshold
try:
    qm.put("Q", Message(b"dup", uid=qm.browse("Q")[0].uid))   # duplicate
except DuplicateMessage:
    pass
qm.put("Q", Message(b"behind", expiry=Int32(1)))
clock.advance(1)
qm.get("Q")            # discards "ahead" (where=get), returns "keep" (removed: got)
qm.browse("Q")         # discards "behind" (where=browse)
qm.put("Q", Message(b"d", expiry=Int32(1))); clock.advance(1); qm.depth("Q")
qm.put("Q", Message(b"s", expiry=Int32(1))); clock.advance(1); qm.sweep_expired("Q")
qm.put("Q", Message(b"a", expiry=Int32(1)))
got = qm.get("Q", confirm_id=5)
qm.undo("Q", 5)
got = qm.get("Q", confirm_id=6); qm.confirm_get("Q", got.uid)
qm.put("Q", Message(b"u"), confirm_id=9); qm.undo("Q", 9)      # removed: deleted
qm.put("Q", Message(b"p")); qm.purge("Q")
qm.put("Q", Message(b"act", expiry=Int32(1)))
qm.close()
clock.advance(1)
qm = QueueManager(db, name="DEV1", clock=clock)
qm.activate("Q")                                          # where=activate
qm.put("Q", Message(b"del", expiry=Int32(1))); clock.advance(1)
qm.delete_queue("Q")                                      # where=delete, then queue_deleted
qm.close()
"""


def test_plugin_from_its_own_package_fires_on_every_event(tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         str(ROOT / "examples" / "rule_plugin")],
        check=True, capture_output=True,
    )
    assert (site / "edgeq_audit_rule" / "__init__.py").exists()
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRIVER), str(tmp_path / "d.db"), str(log)],
        env=env, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("edgeq-audit-rule | Appends every queue event")
    events = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = {e["kind"] for e in events}
    assert kinds == {"activated", "added", "removed", "expired", "duplicate", "threshold", "closed",
                     "queue_deleted"}
    wheres = {e["where"] for e in events if e["kind"] == "expired"}
    assert wheres == {"add", "get", "browse", "activate", "delete", "depth", "sweep"}
    reasons = {e["reason"] for e in events if e["kind"] == "removed"}
    assert reasons == {"got", "confirmed", "deleted", "purged"}
    assert all(isinstance(e["id"], int) for e in events if e["kind"] in ("expired", "removed"))
    assert all(e["queue_manager"] == "DEV1" for e in events)


def test_plugin_is_not_loaded_at_import_time(tmp_path: Path) -> None:
    code = ("import sys, edgeq, edgeq.rules; print(any('registry' in m or 'dead_letter' in m for m in "
            "sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
