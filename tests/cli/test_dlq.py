"""edgeq.cli.dlq (issue 28, defect 1): the dead-letter queue from a shell, as real ``edgeq``
processes: browse what could not be delivered and why, re-send it once the cause is fixed,
delete it, name another dead-letter queue; and ``edgeq sync status`` counting it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgeq import Message, MessageUID, QueueManager
from edgeq.types import DEFAULT_DEAD_LETTER_QUEUE as DLQ
from tests.cli.stores import clean_env

BOUND = 60.0
WHY = "no-queue: HOME has no queue METRICS"


def edgeq(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``edgeq --db DB ARGS`` run to its end as a real process."""
    return subprocess.run([sys.executable, "-m", "edgeq.cli", "--db", str(db), *args], capture_output=True,
                          text=True, env=clean_env(), timeout=BOUND, check=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    with QueueManager(tmp_path / "dev.db", name="DEV1") as qm:
        qm.define_remote_queue("METRICS", target_qmgr="HOME", refusal_limit=1)
        qm.define_remote_queue("ORDERS", target_qmgr="HOME", refusal_limit=1)
    return tmp_path / "dev.db"


def dead_letter(db: Path, queue: str, data: bytes) -> MessageUID:
    """Put ``data`` on remote queue ``queue`` and have its target refuse it up to its limit."""
    with QueueManager(db) as qm:
        uid = qm.put(queue, Message(data, fields={"n": 1}))
        (outcome,) = qm.exchange.refused(queue, [(uid, WHY)])
        assert outcome.dead_lettered
    return uid


def test_browse_shows_what_could_not_be_delivered_and_why(db: Path) -> None:
    uid = dead_letter(db, "METRICS", b"reading")
    dead_letter(db, "ORDERS", b"order")

    done = edgeq(db, "--json", "dlq", "browse", "--queue", "METRICS")

    assert done.returncode == 0, done.stderr
    (shown,) = json.loads(done.stdout)
    assert shown["uid"] == str(uid) and shown["data_text"] == "reading"
    fields = {name: value["value"] for name, value in shown["fields"].items()}
    assert (fields["dlq.reason"], fields["dlq.queue"], fields["dlq.refusal"], fields["dlq.attempts"]) == (
        "refused", "METRICS", WHY, 1)
    text = edgeq(db, "dlq", "browse")
    assert text.returncode == 0 and str(uid) in text.stdout and text.stdout.count("dlq.queue") == 2
    assert edgeq(db, "dlq", "browse", "--queue", "OTHER").stdout == (
        f"No messages on dead-letter queue {DLQ} that left OTHER.\n")


def test_resend_puts_it_back_on_its_queue_without_the_header(db: Path) -> None:
    uid = dead_letter(db, "METRICS", b"reading")
    other = dead_letter(db, "ORDERS", b"order")

    done = edgeq(db, "dlq", "resend", str(uid))

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Re-sent 1 message(s) from dead-letter queue {DLQ}.\n"
    with QueueManager(db) as qm:
        (back,) = qm.exchange.next_for_transmission("METRICS", 10)
        assert back.uid == uid and dict(back.fields) == {"n": 1}
        assert [m.uid for m in qm.dlq_browse()] == [other]
    again = edgeq(db, "dlq", "resend", str(uid))  # it is no longer there: said, exit 1
    assert again.returncode == 1 and f"{uid} stays: not on the dead-letter queue" in again.stderr
    assert edgeq(db, "dlq", "resend", "--all", "--queue", "ORDERS").returncode == 0
    with QueueManager(db) as qm:
        assert qm.dlq_browse() == [] and qm.depth("ORDERS") == 1


def test_delete_removes_for_good_and_needs_a_uid_or_all(db: Path) -> None:
    dead_letter(db, "METRICS", b"a")
    dead_letter(db, "ORDERS", b"b")

    assert edgeq(db, "dlq", "delete").returncode == 2  # neither UID nor --all
    done = edgeq(db, "--json", "dlq", "delete", "--all")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"deleted": 2, "queue": DLQ}
    with QueueManager(db) as qm:
        assert qm.depth(DLQ) == 0 and qm.depth("METRICS") == 0 and qm.depth("ORDERS") == 0


def test_a_named_dead_letter_queue_not_yet_defined_keeps_messages_where_they_are(db: Path) -> None:
    done = edgeq(db, "dlq", "use", "MY.DLQ")
    assert done.returncode == 0 and "not defined: define it with edgeq queue define MY.DLQ" in done.stdout

    with QueueManager(db) as qm:
        uid = qm.put("METRICS", Message(b"kept"))
        (outcome,) = qm.exchange.refused("METRICS", [(uid, WHY)])
        assert (outcome.dead_lettered, outcome.kept) == (False, True)
        assert [m.uid for m in qm.exchange.next_for_transmission("METRICS", 10)] == [uid]
        assert DLQ not in qm.queue_names()
    assert edgeq(db, "queue", "define", "MY.DLQ").returncode == 0
    assert edgeq(db, "dlq", "use").stdout == "MY.DLQ\n"
    with QueueManager(db) as qm:
        assert qm.exchange.refused("METRICS", [(uid, WHY)])[0].dead_lettered
        assert [m.uid for m in qm.browse("MY.DLQ")] == [uid]
    assert edgeq(db, "dlq", "use", "--default").stdout.startswith(f"{DLQ} (not made yet")


def test_sync_status_counts_the_dead_letter_queue_and_fails_while_it_holds_messages(db: Path) -> None:
    dead_letter(db, "METRICS", b"reading")

    done = edgeq(db, "sync", "status")

    assert done.returncode == 1
    assert "DEAD-LETTERED" in done.stdout and "GIVEN-UP" not in done.stdout
    assert f"{DLQ}: 1 message(s) could not be delivered: see edgeq dlq browse" in done.stdout
    state = json.loads(edgeq(db, "sync", "status", "--json").stdout)
    assert (state["dead_letter_queue"], state["dead_letter_depth"], state["failing"]) == (DLQ, 1, True)
    metrics = edgeq(db, "sync", "status", "--prometheus").stdout
    assert f'edgeq_agent_dead_letter_messages{{queue="{DLQ}"}} 1' in metrics
    assert edgeq(db, "dlq", "delete", "--all").returncode == 0
    assert edgeq(db, "sync", "status").returncode == 0
