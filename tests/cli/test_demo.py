"""The guided demo. Act one: every expiry check point fires, and the store is left as
described. Act two: a device and the real home server on loopback store and forward
exactly once, pull a reply, and a message expires on both sides, never delivered.
Both acts print the same on every run."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeq import QueueManager
from edgeq.cli import cli
from edgeq.cli.demo import (
    DEMO_QM,
    DEVICE_QM,
    HOME_QM,
    DemoPathInUse,
    DemoResult,
    demo_paths,
    prepare_path,
    run_demo,
)

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = [
    ("ORDERS", "add", "order-X"),
    ("ORDERS", "get", "order-C"),
    ("ORDERS", "depth", "order-A"),
    ("ALERTS", "delete", "alert-1"),
    ("ALERTS", "delete", "alert-2"),
    ("ORDERS", "activate", "order-F"),
    ("ORDERS", "sweep", "reading-1"),
    ("ORDERS", "sweep", "reading-2"),
]


#: ORDERS' counters at the end: 7 stored puts (order-X never was), order-B got and
#: order-G confirmed, 6 expirations on ORDERS (ALERTS' 2 went with the queue), each copied.
EXPECTED_STATS = {
    "added": 7, "got": 2, "expired": 6, "dead_lettered": 6, "expired.add": 1, "expired.get": 1,
    "expired.depth": 1, "expired.activate": 1, "expired.sweep": 2,
}

#: What act two counted on each side after each step (read from the real stores).
EXPECTED_FACTS = {
    # three puts while the server is down: nothing sent, all three kept on the device
    "store": {"sent": 0, "device ORDERS": 3, "server ORDERS": 0},
    # the server starts: all three forwarded and accepted once; a second push sends nothing
    "forward": {"transmitted": 3, "device ORDERS": 0, "server ORDERS": 3, "sent again": 0, "accepted": 3},
    # the link drops after the put: a locked (invisible) copy there, the original here
    "drop": {"server ORDERS": 4, "server ORDERS visible": 3, "device ORDERS": 1},
    # it comes back: order-4 put twice, accepted once
    "resend": {"device ORDERS": 0, "order-4 accepted": 1, "order-4 puts": 2},
    "reply": {"received": 1, "device INBOX": 0, f"server {DEVICE_QM}.INBOX": 0},
    # expires twice: locked there, kept here; then gone on both sides, sent again never, delivered never
    "twice": {"server ORDERS": 4, "server ORDERS visible": 3, "device ORDERS": 1, "sent": 0, "reported": 1,
              "swept": 1, "order-5 delivered": 0},
    "end": {f"{DEVICE_QM} ORDERS": 0, f"{DEVICE_QM} INBOX": 0, f"{HOME_QM} ORDERS": 3,
            f"{HOME_QM} {DEVICE_QM}.INBOX": 0},
}

#: Act two as it must read on every run (DIR: the demo's directory).
ACT_TWO = """\
Act two: store and forward, the job edgeq exists for.
Two more stores: the device DEMO-DEV1 (DIR/demo-device.db)
and its home server DEMO-HOME (DIR/demo-home.db).
The home server is the real one, the app edgeq serve runs (Starlette on uvicorn), on a
loopback port; the device talks to it with the real sync agent (SyncAgent, what edgeq sync
runs): CBOR over HTTP. Each queue manager has its own ManualClock; both start at
2005-01-01T09:40:00Z, the day of MQe's own example, and move together.

[12] 09:40:00  A device and its home server, which is not running yet
    DEMO-DEV1  ORDERS           remote queue for DEMO-HOME's ORDERS: stored here, forwarded later
    DEMO-DEV1  INBOX            home-server queue: filled by pulling DEMO-HOME's DEMO-DEV1.INBOX
    DEMO-HOME  ORDERS           local queue: where the device's orders arrive
    DEMO-HOME  DEMO-DEV1.INBOX  local queue: what the server holds for the device
    The home server journals what it accepts, expires and delivers; the device journals its
    expiries and reports them. A narrating rule on each side prints every expiry: the
    'device>' and 'server>' lines.

[13] 09:40:00  Store: three orders put while the home server is down
    order-1, order-2 and order-3 put on the device's remote queue ORDERS (no expiry).
    push_once(), exchange by exchange:
      hello                                  x  no answer: the home server is unreachable
    The push failed: nothing listens there yet. Nothing is lost: the orders
    wait in the device's store. DEMO-DEV1 ORDERS depth 3, DEMO-HOME ORDERS depth 0.
    (edgeq sync, the daemon, tries again with exponential backoff.)

[14] 09:40:00  Forward: the home server starts, and each order arrives exactly once
    ... both clocks move on 1m, to 09:41:00
    The home server starts: create_app(DEMO-HOME) served by uvicorn on loopback.
    push_once():
      hello                                  <- DEMO-HOME, clocks 0ms apart
      put ORDERS: 3 messages, resend         <- stored 3
      confirm ORDERS: 3 uids                 <- confirmed 3
    A hello, then MQe's two stages for the batch: the put stores the orders locked (invisible
    to the server's applications), the confirm makes them visible, then the device deletes its
    copies in one transaction. The puts say 'resend': until a push has completed, the agent
    cannot know whether an earlier run sent them; a resend of what the server never had is new.
    DEMO-DEV1 ORDERS depth 0; DEMO-HOME ORDERS depth 3, browse:
      browse ORDERS: 'order-1' priority 4, no expiry of its own
      browse ORDERS: 'order-2' priority 4, no expiry of its own
      browse ORDERS: 'order-3' priority 4, no expiry of its own
    push_once() again:
      (no exchange: nothing to send)
    The server's journal accepted order-1 once, order-2 once, order-3 once.

[15] 09:41:00  The link drops between the two stages: resent, and still exactly once
    ... both clocks move on 1m, to 09:42:00
    order-4 put on the device.
    push_once(), and the link drops right after the put's answer:
      put ORDERS: 1 message                  <- stored 1
      (the link drops: the home server stops listening)
      confirm ORDERS: 1 uid                  x  no answer: the home server is unreachable
    DEMO-HOME holds order-4 locked: ORDERS depth 4, but a browse shows 3. The device
    has no confirm, so it keeps its copy: DEMO-DEV1 ORDERS depth 1.
    ... both clocks move on 2m, to 09:44:00
    The link is back: the home server starts again. push_once():
      hello                                  <- DEMO-HOME, clocks 0ms apart
      put ORDERS: 1 message, resend          <- replaced 1
      confirm ORDERS: 1 uid                  <- confirmed 1
    The agent put order-4 again, flagged resend: the server replaced its locked copy instead
    of storing a second one, and the confirm made it visible.
    DEMO-HOME ORDERS holds order-1, order-2, order-3, order-4; DEMO-DEV1 ORDERS depth 0.
    order-4 crossed the wire twice; the server's journal accepted it once.

[16] 09:44:00  A reply: the device's home-server queue pulls it from the home server
    ... both clocks move on 1m, to 09:45:00
    The server's application gets from ORDERS: 'order-1' priority 4, no expiry of its own,
    and puts its reply 'order-1 shipped' on DEMO-DEV1.INBOX, with expire_after(30m).
    pull_once():
      pull INBOX                             <- 1 message
      pull-confirm INBOX: 1 uid              <- confirmed 1
    An assured get there (locked), an assured put here, then the pull-confirm deletes it there.
    The device's application gets from INBOX:
      'order-1 shipped' priority 4, Int64 absolute 2005-01-01T10:15:00Z, 30m left
    DEMO-DEV1 INBOX depth 0; DEMO-HOME DEMO-DEV1.INBOX depth 0.

[17] 09:45:00  MQe's "expires twice": the expiry passes between put and confirm
    MQe's manual: "Assume that an asynchronous queue has a message on it due to expire at 10:00
    1st Jan 2005. [...] Suppose that the first transmission stage occurs at 09:55. [...] Then, if
    the network fails until 10:05, the expiry time of the message is missed. Therefore, the message
    expires on the remote queue and the queue expiry rule gets fired. Also, in due course, the queue
    expiry rule gets fired on the destination queue manager." Here it is.
    ... both clocks move on 10m, to 09:55:00
    order-5 put on the device with expire_at(2005-01-01T10:00:00Z).
    push_once(), and the link drops right after the put's answer:
      hello                                  <- DEMO-HOME, clocks 0ms apart
      put ORDERS: 1 message, 5m left         <- stored 1
      (the link drops: the home server stops listening)
      confirm ORDERS: 1 uid                  x  no answer: the home server is unreachable
    The first stage happened: DEMO-HOME holds order-5 locked (ORDERS depth 4, a browse
    shows 3), due by 10:00:00 on its own clock too: its time left crossed the wire.
    The confirm never came, so the device keeps its copy: DEMO-DEV1 ORDERS depth 1.
    ... both clocks move on 10m, to 10:05:00
    At 10:05 the link is back: the home server starts again. push_once():
      hello                                  <- DEMO-HOME, clocks 0ms apart
      device> ORDERS: 'order-5' EXPIRED at check point 'get'
      expiries: 1 report                     <- recorded 1
    Reading its store to transmit, the device found order-5 expired: its rule fired, nothing
    was sent, and the expiry went to the server's journal as the device's.
    In due course the home server's expiry sweep runs (edgeq serve: every --sweep-interval):
      server> ORDERS: 'order-5' EXPIRED at check point 'sweep'
    Both rules fired for the same message (the same uid): not a duplicate, one message that
    expired on each side. It was never delivered: DEMO-HOME ORDERS holds order-2, order-3, order-4.
    The server's journal of order-5, nothing accepted or delivered:
      expired on the device at check point 'get', 10:05:00
      expired on the server at check point 'sweep', 10:05:00

[18] 10:05:00  Where things stand (act two)
    DEMO-DEV1  ORDERS           depth 0
    DEMO-DEV1  INBOX            depth 0
    DEMO-HOME  ORDERS           depth 3
    DEMO-HOME  DEMO-DEV1.INBOX  depth 0
    The home server's journal, message by message:
      order-1          accepted 09:41:00, delivered 09:45:00
      order-2          accepted 09:41:00
      order-3          accepted 09:41:00
      order-4          accepted 09:44:00
      order-1 shipped  delivered 09:45:00
      order-5          expired 10:05:00 (device, 'get'), expired 10:05:00 (server, 'sweep')
    Look at them (opened again, the stores follow the real clock):
      edgeq --db DIR/demo-home.db browse ORDERS
      edgeq --db DIR/demo-home.db server devices list"""

#: The home server's journal at the end: (kind, side, message, check point).
EXPECTED_JOURNAL = [
    ("accepted", "server", "order-1", None), ("accepted", "server", "order-2", None),
    ("accepted", "server", "order-3", None), ("accepted", "server", "order-4", None),
    ("delivered", "server", "order-1", None), ("delivered", "server", "order-1 shipped", None),
    ("expired", "device", "order-5", "get"), ("expired", "server", "order-5", "sweep"),
]


def demo_output(path: Path) -> tuple[str, DemoResult]:
    """Both acts on new stores at ``path`` (act two's beside it): the output, with the
    directory written as DIR, and what they did."""
    lines: list[str] = []
    result = run_demo(path, lines.append)
    assert result.path == path
    assert result.stats == EXPECTED_STATS
    return "\n".join(lines).replace(str(path.parent), "DIR"), result


def steps(text: str) -> dict[int, str]:
    """The narrated steps of ``text``, by number, each from its heading to the next."""
    found = re.split(r"\n\n(?=\[\d+\] )", text)
    return {int(block[1:block.index("]")]): block.strip("\n") for block in found if block.startswith("[")}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, DemoResult]:
    """One run of the whole demo, for the tests that only read what it printed and did."""
    return demo_output(tmp_path_factory.mktemp("demo") / "demo.db")


def test_every_check_point_fires_and_is_shown(run: tuple[str, DemoResult]) -> None:
    out, result = run
    assert [(q, str(w), d) for q, w, d in result.expirations] == EXPECTED
    for queue, where, data in EXPECTED:
        assert f"rule> {queue}: '{data}' EXPIRED at check point '{where}'" in out
    for n, where in enumerate(("add", "get", "depth", "delete", "activate"), start=1):
        assert f"Expiry check {n} of 5, '{where}'" in out
    assert list(steps(out)) == list(range(1, 19))  # act two numbers on from act one
    assert "The rules saw 8 expirations: add 1, get 1, depth 1, delete 2, activate 1, sweep 2." in out


def test_the_tour_shows_expiry_kinds_cap_priority_and_assured_delivery(run: tuple[str, DemoResult]) -> None:
    out, _ = run
    browse = [line.split(": ", 1)[1] for line in out.splitlines() if "browse ORDERS: 'order-" in line][:3]
    assert [b.split()[0] for b in browse] == ["'order-C'", "'order-B'", "'order-A'"]  # priority order
    assert "Int64 absolute 2025-11-21T09:00:20Z, 20s left" in browse[0]
    assert "Int32(300000) relative, 5m left" in browse[1]
    assert "the queue's expiry, 1m left" in browse[2]
    assert out.count("Int64 absolute 2025-11-21T09:00:30Z, 30s left") == 2  # the cap
    assert "'order-B' priority 5, Int32(300000) relative, 3m 55s left" in out  # override + remaining
    assert "backouts 1" in out  # undo
    assert "rule> ORDERS: 'order-G' removed (confirmed)" in out
    assert "confirm_get() deleted it: depth of ORDERS is 0." in out


def test_rules_are_bound_by_name_and_the_counters_shown(run: tuple[str, DemoResult]) -> None:
    out, _ = run
    assert "rules=[('dead-letter', {'queue': 'DEAD.LETTER'}), 'counters']" in out
    assert "the stored bindings (dead-letter, counters) came back by themselves" in out
    assert "from queue_stats('ORDERS'):" in out
    for name, value in EXPECTED_STATS.items():
        assert re.search(rf"^      {re.escape(name)} +{value}$", out, flags=re.MULTILINE), name


def test_act_two_narrates_every_step_the_same_on_every_run(run: tuple[str, DemoResult]) -> None:
    out, _ = run
    got, want = steps(out), steps(ACT_TWO)
    assert list(want) == list(range(12, 19))
    for n, block in want.items():
        assert got[n] == block, f"step [{n}] differs"
    assert out.endswith(ACT_TWO)  # the act's introduction too, and nothing after it


def test_act_two_counts_each_side_after_each_step(run: tuple[str, DemoResult]) -> None:
    _, result = run
    assert result.forward is not None and result.missing == []
    assert result.forward.facts == EXPECTED_FACTS


def test_act_two_forwards_each_order_exactly_once(run: tuple[str, DemoResult]) -> None:
    """Read off the wire: each order confirmed once, order-4 put twice (stored, then
    replaced by the resend), the reply pulled and confirmed once."""
    _, result = run
    assert result.forward is not None
    uid = result.forward.uids
    statuses: dict[tuple[str, str], list[str | None]] = {}
    for path, uids, answered in result.forward.exchanges:
        for n, carried in enumerate(uids):
            statuses.setdefault((path, carried), []).append(None if answered is None else answered[n])
    for order in ("order-1", "order-2", "order-3", "order-4"):
        assert statuses[("/v1/confirm", uid[order])].count("confirmed") == 1, order
    assert statuses[("/v1/put", uid["order-4"])] == ["stored", "replaced"]
    assert statuses[("/v1/confirm", uid["order-4"])] == [None, "confirmed"]  # the first never answered
    assert statuses[("/v1/pull/confirm", uid["order-1 shipped"])] == ["confirmed"]
    paths = [path for path, _, _ in result.forward.exchanges]
    assert paths[0] == "/v1/hello" and result.forward.exchanges[0][2] is None  # the link was down


def test_act_two_expires_twice_and_never_delivers(run: tuple[str, DemoResult]) -> None:
    """MQe's seed: put stage at 09:55, due at 10:00, link down until 10:05: the rule fires
    on both sides, for the same message, and it is never confirmed nor delivered."""
    _, result = run
    assert result.forward is not None
    uid = result.forward.uids["order-5"]
    assert result.forward.expirations == [("device", "ORDERS", "get", "order-5"),
                                          ("server", "ORDERS", "sweep", "order-5")]
    carried = [(path, answered) for path, uids, answered in result.forward.exchanges if uid in uids]
    assert carried == [("/v1/put", ["stored"]), ("/v1/confirm", None), ("/v1/expiries", ["recorded"])]
    assert result.forward.journal == EXPECTED_JOURNAL
    kinds = Counter((kind, label) for kind, _, label, _ in result.forward.journal)
    assert kinds[("accepted", "order-5")] == kinds[("delivered", "order-5")] == 0


def test_the_stores_are_left_as_described(tmp_path: Path) -> None:
    path = tmp_path / "demo.db"
    out, result = demo_output(path)
    assert "edgeq --db DIR/demo.db browse DEAD.LETTER" in out
    assert "edgeq --db DIR/demo.db queue stats ORDERS" in out
    with QueueManager(path) as qm:  # the real clock from here on
        assert qm.name == DEMO_QM
        assert qm.queue_names() == ["DEAD.LETTER", "ORDERS"]
        assert qm.depth("ORDERS") == 0
        assert [(b.name, b.config, b.persisted) for b in qm.queue_bindings("ORDERS")] == [
            ("dead-letter", {"queue": "DEAD.LETTER"}, True), ("counters", {}, True),
        ]
        assert qm.queue_stats("ORDERS") == EXPECTED_STATS
        copies = qm.browse("DEAD.LETTER")
    found = [(m.fields["dlq.queue"], m.fields["dlq.where"], m.data.decode()) for m in copies]
    assert sorted(found) == sorted(EXPECTED)
    assert all(m.expiry is None and m.remaining_expiry_ms is None for m in copies)
    # Act two's stores: the orders forwarded once each, the expired one on neither side.
    assert result.forward is not None
    uids = {u: data for data, u in result.forward.uids.items()}
    device, home = tmp_path / "demo-device.db", tmp_path / "demo-home.db"
    with QueueManager(home) as qm:
        assert qm.name == HOME_QM
        assert [m.data for m in qm.browse("ORDERS")] == [b"order-2", b"order-3", b"order-4"]
        assert qm.depth(f"{DEVICE_QM}.INBOX") == 0
        assert [(e.kind, e.side, uids[e.uid], e.check_point) for e in qm.journal_since()] == EXPECTED_JOURNAL
        assert [d.name for d in qm.devices()] == [DEVICE_QM]
    with QueueManager(device) as qm:
        assert qm.name == DEVICE_QM
        assert (qm.depth("ORDERS"), qm.depth("INBOX")) == (0, 0)
        assert qm.journal_since() == []  # its expiry was reported to the server, and trimmed


def test_the_output_is_the_same_on_every_run(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = demo_output(tmp_path / "a" / "demo.db")
    second, _ = demo_output(tmp_path / "b" / "demo.db")
    assert first == second
    assert "[18]" in first and "DIR/demo-home.db" in first


def test_without_the_server_extras_act_one_runs_and_says_how_to_get_act_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # what `import uvicorn` does when it is not installed
    path = tmp_path / "demo.db"
    out, result = demo_output(path)
    assert result.forward is None and result.missing == ["uvicorn"]
    assert list(steps(out)) == list(range(1, 12))  # act one, whole
    assert out.endswith(
        "Act two, store and forward between a device and its home server over HTTP, needs the\n"
        "server and sync extras (uvicorn cannot be imported here). Install them\n"
        "and run the demo again:\n"
        "    pip install 'edgeq[server,sync]'     (make demo installs them)"
    )
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == ["demo.db"]


def test_prepare_path_never_clobbers(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    with pytest.raises(DemoPathInUse, match="already exists"):
        prepare_path(notes)
    with pytest.raises(DemoPathInUse, match="not an earlier demo"):
        prepare_path(notes, replace=True)
    assert notes.read_text() == "keep me"
    user = tmp_path / "user.db"
    with QueueManager(user, name="DEV1") as qm:
        qm.define_queue("ORDERS")
    with pytest.raises(DemoPathInUse, match="not an earlier demo"):
        prepare_path(user, replace=True)
    with QueueManager(user) as qm:
        assert qm.queue_names() == ["ORDERS"]
    with pytest.raises(DemoPathInUse, match="does not exist"):
        prepare_path(tmp_path / "missing" / "demo.db")
    prepare_path(tmp_path / "new.db")  # fine: nothing there


def test_prepare_path_checks_act_two_stores_and_deletes_nothing_it_refuses(tmp_path: Path) -> None:
    tour = tmp_path / "tour.db"
    assert list(demo_paths(tour)) == [tour, tmp_path / "tour-device.db", tmp_path / "tour-home.db"]
    with QueueManager(tour, name=DEMO_QM):
        pass  # an earlier demo's act one
    with QueueManager(tmp_path / "tour-home.db", name="HOME") as qm:  # someone's own home server
        qm.define_queue("ORDERS")
    with pytest.raises(DemoPathInUse, match=re.escape("tour-home.db is not an earlier demo's store")):
        prepare_path(tour, replace=True)
    assert tour.exists()  # refused before anything was deleted
    with QueueManager(tmp_path / "tour-home.db") as qm:
        assert qm.queue_names() == ["ORDERS"]
    (tmp_path / "tour-home.db").unlink()
    with QueueManager(tmp_path / "tour-device.db", name=DEVICE_QM):
        pass
    with QueueManager(tmp_path / "solo-device.db", name=DEVICE_QM):
        pass
    with pytest.raises(DemoPathInUse, match=re.escape("solo-device.db already exists")):
        prepare_path(tmp_path / "solo.db")  # act one's store is new, act two's is not
    prepare_path(tour, replace=True)  # both are the demo's: deleted
    assert not tour.exists() and not (tmp_path / "tour-device.db").exists()


def test_cli_demo(tmp_path: Path) -> None:
    path = tmp_path / "tour.db"
    user_db = tmp_path / "user.db"
    runner = CliRunner()
    sync_logs = logging.getLogger("edgeq.sync")
    level = sync_logs.level
    result = runner.invoke(cli, ["--db", str(user_db), "demo", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # the narration says the server was unreachable: no agent warning repeats it
    assert sync_logs.level == level  # muted for the demo only
    assert f"Store: {path} (queue manager {DEMO_QM})." in result.stdout
    assert "Expiry check 5 of 5, 'activate'" in result.stdout
    assert f"Two more stores: the device {DEVICE_QM} ({tmp_path / 'tour-device.db'})" in result.stdout
    assert "[18] 10:05:00  Where things stand (act two)" in result.stdout
    assert not user_db.exists()  # the global --db is never touched
    again = runner.invoke(cli, ["demo", "--db", str(path)])
    assert again.exit_code == 1 and "already exists" in again.stderr and "--replace" in again.stderr
    replaced = runner.invoke(cli, ["demo", "--db", str(path), "--replace"])
    assert replaced.exit_code == 0, replaced.output
    with QueueManager(path) as qm:
        assert qm.depth("DEAD.LETTER") == len(EXPECTED)
    with QueueManager(tmp_path / "tour-home.db") as qm:
        assert qm.depth("ORDERS") == 3  # a new run's, not two runs' worth


def test_cli_demo_refuses_to_replace_a_user_store(tmp_path: Path) -> None:
    user = tmp_path / "user.db"
    with QueueManager(user, name="DEV1") as qm:
        qm.define_queue("MINE")
    before = user.read_bytes()
    result = CliRunner().invoke(cli, ["demo", "--db", str(user), "--replace"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "not an earlier demo's store" in result.stderr
    assert user.read_bytes() == before


def test_cli_demo_default_path_is_a_new_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    match = re.search(r"^Store: (.+) \(queue manager", result.stdout, flags=re.MULTILINE)
    assert match is not None
    path = Path(match.group(1))
    assert path.parent.parent == tmp_path and path.parent.name.startswith("edgeq-demo-") and path.exists()
    assert sorted(p.name for p in path.parent.glob("*.db")) == ["demo-device.db", "demo-home.db", "demo.db"]


def test_make_demo_installs_what_act_two_needs_in_one_command(tmp_path: Path) -> None:
    """`make demo` on a fresh machine: the venv, edgeq with the server and sync extras, the demo."""
    make = shutil.which("make")
    assert make is not None, "make is needed to run `make demo` (README: Two commands)"
    plan = subprocess.run([make, "--no-print-directory", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "pip install --quiet -e '.[server,sync]'" in plan
    assert plan.rstrip().endswith(f"{tmp_path / 'venv'}/bin/edgeq demo")


@pytest.mark.parametrize("where", ["a directory", "in a missing directory"])
def test_cli_demo_a_bad_db_is_a_usage_error_that_writes_nothing(tmp_path: Path, where: str) -> None:
    path = tmp_path if where == "a directory" else tmp_path / "missing" / "tour.db"
    result = CliRunner().invoke(cli, ["demo", "--db", str(path)])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--db'" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_regular_install_ships_the_demo() -> None:
    """`pip install edgeq` (a wheel, not editable) must carry the command line and the
    demo's package: setuptools ships only the packages pyproject.toml lists."""
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert {"edgeq.cli", "edgeq.cli.demo"} <= set(listed), f"pyproject.toml lists only {listed}"
