"""``edgeq consume --exec`` on a poison message: a command that keeps failing is run again
only on the queue's redelivery schedule (1 s doubling), never in a hot loop, and the
messages behind it are handled meanwhile. Spawns are counted by a file each run appends to."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from edgeq import Message, QueueManager
from tests.cli.stores import edgeq, runner, store_with_q
from tests.cli.test_cli import fail, ok

BOUND = 120.0


def put(db: Path, *messages: Message) -> None:
    with QueueManager(db) as qm:
        qm.put_many("Q", list(messages))


def ready(db: Path) -> list[tuple[bytes, int]]:
    with QueueManager(db) as qm:
        return [(m.data, m.backout_count) for m in qm.browse("Q")]


def test_a_failing_command_is_spawned_on_the_redelivery_schedule_not_in_a_loop(tmp_path: Path) -> None:
    db = store_with_q(tmp_path)
    put(db, Message(b"poison"))
    spawns = tmp_path / "spawns"
    # Each run appends its backout count and the time (ns); the process stops once no
    # message came for 2.5 s: after the runs at 0, 1 and 3 s the next is due 4 s later.
    command = f'echo "$EDGEQ_BACKOUT_COUNT $(date +%s%N)" >> "{spawns}"; exit 3'
    proc = edgeq(db, "consume", "Q", "--exec", command, "--wait", "2500ms", "--max", "50")
    _, err = proc.communicate(timeout=BOUND)
    assert proc.returncode == 0, err
    runs = [line.split() for line in spawns.read_text().splitlines()]
    # Before the delay: 50 runs in well under a second (about 100 a second, for ever without --max).
    assert 2 <= len(runs) <= 4, runs
    assert [int(count) for count, _ in runs] == list(range(len(runs)))
    gaps = [(int(b) - int(a)) / 1e9 for (_, a), (_, b) in pairwise(runs)]
    assert all(gap >= 0.9 * 2**n for n, gap in enumerate(gaps)), gaps  # 1 s, then 2 s, then 4 s
    assert err.decode().count("exited with status 3") == len(runs)  # one line per failure
    assert "undone (backout 1), offered again in 1s" in err.decode()
    assert "undone (backout 2), offered again in 2s" in err.decode()
    assert "Traceback" not in err.decode()
    assert ready(db) == [(b"poison", len(runs))]


def test_the_messages_behind_a_failing_one_are_handled_meanwhile(tmp_path: Path) -> None:
    db = store_with_q(tmp_path)
    put(db, Message(b"poison"), Message(b"fine-1"), Message(b"fine-2"))
    result = runner(db)("consume", "Q", "--wait", "0", "--max", "20", "--exec", 'test "$(cat)" != poison')
    ok(result)  # (before the delay: the poison message 20 times, nothing else)
    assert result.stderr.count("exited with status 1") == 1  # the poison message once, then the others
    assert ready(db) == [(b"poison", 1)]
    result = runner(db)("consume", "Q", "--wait", "0", "--exec", "exit 3")  # a new process: still delayed
    assert ok(result) == "" and "exited with status" not in result.stderr
    assert ready(db) == [(b"poison", 1)]


def test_a_queue_defined_with_its_own_redelivery_delay(tmp_path: Path) -> None:
    db = store_with_q(tmp_path)
    run = runner(db)
    ok(run("queue", "define", "JOBS", "--redelivery-delay", "500ms", "--max-redelivery-delay", "1m"))
    shown = ok(run("queue", "show", "JOBS"))
    assert "redelivery" in shown and "after 500ms, doubling with each failure up to 1m" in shown
    assert "Altered queue JOBS: redelivery_delay_ms 0 (0ms)." in ok(
        run("queue", "alter", "JOBS", "--redelivery-delay", "0"))
    assert "at once after a failure" in ok(run("queue", "show", "JOBS"))
    fail(run("queue", "alter", "JOBS", "--redelivery-delay", "2h", "--max-redelivery-delay", "1h"), 1,
         "redelivery_delay_ms (7200000) is longer than max_redelivery_delay_ms (3600000)")
    with QueueManager(db) as qm:
        attrs = qm.queue_attributes("JOBS")
        assert (attrs.redelivery_delay_ms, attrs.max_redelivery_delay_ms) == (0, 60_000)
