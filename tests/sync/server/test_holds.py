"""Unconfirmed puts no longer pile up on the home server (issue 15, defect 7): a put held
longer than the hold is undone (lazily at the device's next put, and by the server's
timer), each device has a quota of held messages and bytes, and a device's resend of
an undone put still goes through, exactly once.

Against a real home server over loopback (uvicorn in a thread, ManualClocks on both
sides) and, at the end, a real ``edgeq serve`` process with the operator's commands.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from edgeq import ManualClock, Message, QueueManager
from edgeq.cli import cli
from edgeq.sync import messages as wm
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.link import ServerLink
from edgeq.sync.agent.transport import Unreachable
from edgeq.sync.server.holds import DEFAULT_HOLD_MS, REFUSAL_MEMO_MS, HoldKeeper, HoldPolicy
from tests.sync.conftest import T0, LiveServer, Network, Recorder, edgeq_serve, free_port

CONFIRM = p.PATH_CONFIRM


def fill(qm: QueueManager, n: int, data: bytes = b"m") -> list[bytes]:
    """Put ``n`` messages on the device's remote queue ORDERS; returns their data."""
    bodies = [data + b"%d" % i for i in range(n)]
    qm.put_many("ORDERS", [Message(b) for b in bodies])
    return bodies


@pytest.fixture
def dead_store(tmp_path: Path, device_clock: ManualClock) -> Iterator[QueueManager]:
    """An earlier store of DEV1 (another incarnation), lost after it pushed: whatever it
    left unconfirmed on the server, nobody will ever confirm."""
    qm = QueueManager(tmp_path / "dead.db", name="DEV1", clock=device_clock)
    qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    yield qm
    qm.close()


@pytest.fixture
def agent_of(network: Network, make_agent: Callable[..., SyncAgent]) -> Iterator[Callable[..., SyncAgent]]:
    """An agent of ``qm`` to ``server``, its HTTP through ``network`` (faults), in batches
    of 10 (the agent confirms a whole batch at once: within the servers' ``max_batch``)."""
    clients: list[httpx.Client] = []

    def _make(qm: QueueManager, server: Any) -> SyncAgent:
        client = httpx.Client(transport=network, timeout=10)
        clients.append(client)
        return make_agent(qm, server.url, client=client, batch_size=10)

    yield _make
    for client in clients:
        client.close()


def leave_unconfirmed(agent: SyncAgent, network: Network) -> None:
    """Push with every confirm lost on the way: the server holds the batch, locked."""
    network.down_for.add(CONFIRM)
    report = agent.push_once()
    network.down_for.discard(CONFIRM)
    assert not report.ok and report.transmitted == 0


def visible(qm: QueueManager) -> list[bytes]:
    return sorted(m.data for m in qm.browse("ORDERS"))


def test_a_dead_stores_unconfirmed_puts_are_undone_at_the_devices_next_put_after_the_hold(
    home_qm: QueueManager, server: LiveServer, dead_store: QueueManager, device_qm: QueueManager,
    server_clock: ManualClock, network: Network, agent_of: Callable[..., SyncAgent],
) -> None:
    """Before the fix the 5 locked copies stayed on the server for ever (depth 7, not 2)."""
    rules = Recorder()
    home_qm.add_rule("ORDERS", rules)
    lost = fill(dead_store, 5, b"lost")
    leave_unconfirmed(agent_of(dead_store, server), network)
    assert home_qm.depth("ORDERS") == 5 and visible(home_qm) == []  # held: locked, invisible
    server_clock.advance(DEFAULT_HOLD_MS - 1)
    fresh = fill(device_qm, 1, b"a")
    assert agent_of(device_qm, server).push_once().transmitted == 1
    assert home_qm.depth("ORDERS") == 6  # not yet held for the whole hold: kept
    server_clock.advance(1)
    fresh += fill(device_qm, 1, b"b")
    assert agent_of(device_qm, server).push_once().transmitted == 1
    assert home_qm.depth("ORDERS") == 2 and visible(home_qm) == sorted(fresh)
    assert home_qm.exchange.held_puts() == []
    assert sorted(data for data, reason in rules.removed() if reason == "deleted") == sorted(lost)


def test_the_servers_timer_undoes_holds_older_than_the_hold(
    home_qm: QueueManager, server: LiveServer, dead_store: QueueManager, server_clock: ManualClock,
    network: Network, agent_of: Callable[..., SyncAgent],
) -> None:
    fill(dead_store, 4)
    leave_unconfirmed(agent_of(dead_store, server), network)
    keeper = HoldKeeper(home_qm, HoldPolicy(hold_ms=60_000), interval_s=0.005)
    keeper.start()
    try:
        assert keeper.wait_passes(2, timeout=10)
        assert home_qm.exchange.held_usage("DEV1").messages == 4  # not held long enough
        server_clock.advance(60_000)
        # A pass that began after the clock moved: the one after the next.
        assert keeper.wait_passes(keeper.passes + 2, timeout=10)
        assert home_qm.exchange.held_puts() == [] and home_qm.depth("ORDERS") == 0
    finally:
        keeper.stop()
    assert keeper.interval_s == 0.005 and HoldKeeper(home_qm, HoldPolicy()).interval_s == 60.0


def test_a_confirm_after_the_undo_is_unknown_and_the_devices_resend_goes_through_once(
    home_qm: QueueManager, server: LiveServer, device_qm: QueueManager, server_clock: ManualClock,
    network: Network, agent_of: Callable[..., SyncAgent],
) -> None:
    """The undone uids were never confirmed, so never remembered: the device's resend is
    stored afresh, not taken for a duplicate, and each message arrives exactly once."""
    rules = Recorder()
    home_qm.add_rule("ORDERS", rules)
    keeper = HoldKeeper(home_qm, HoldPolicy())
    sent = fill(device_qm, 6)
    agent = agent_of(device_qm, server)

    def the_hold_passes() -> None:  # while the confirm is on its way
        server_clock.advance(DEFAULT_HOLD_MS)
        assert keeper.run_once() == 6

    network.before[CONFIRM] = the_hold_passes
    first = agent.push_once()
    assert (first.transmitted, first.requeued) == (0, 6)  # confirm answered "unknown": kept
    assert device_qm.depth("ORDERS") == 6 and home_qm.depth("ORDERS") == 0
    second = agent.push_once()
    assert second.ok and (second.transmitted, second.duplicates) == (6, 0)
    assert device_qm.depth("ORDERS") == 0
    assert [m.data for m in home_qm.browse("ORDERS")] == sent
    assert [kind for kind, _, _ in rules.calls
            if kind in ("added", "removed")] == ["added"] * 6 + ["removed"] * 6 + [
        "added"] * 6


def test_a_put_past_the_devices_quota_is_refused_whole_and_the_device_keeps_its_messages(
    home_qm: QueueManager, make_server: Callable[..., LiveServer], dead_store: QueueManager,
    device_qm: QueueManager, server_clock: ManualClock, network: Network, agent_of: Callable[..., SyncAgent],
) -> None:
    """Before the fix a device could hold any number of unconfirmed puts: the last 3 were stored too."""
    server = make_server(home_qm, max_batch=10, holds=HoldPolicy(max_messages=20, max_bytes=None))
    fill(dead_store, 20)
    leave_unconfirmed(agent_of(dead_store, server), network)
    assert home_qm.exchange.held_usage("DEV1").messages == 20
    mine = fill(device_qm, 3, b"new")
    agent = agent_of(device_qm, server)
    refused = agent.push_once()
    assert not refused.ok and "429 over-quota" in (refused.error or "")
    assert "DEV1 holds 20 unconfirmed message(s)" in (refused.error or "")
    assert device_qm.depth("ORDERS") == 3 and home_qm.depth("ORDERS") == 20  # nothing of it was stored
    server_clock.advance(DEFAULT_HOLD_MS)  # the dead store's puts outstay the hold: room again
    done = agent.push_once()
    assert done.ok and done.transmitted == 3
    assert visible(home_qm) == sorted(mine) and home_qm.depth("ORDERS") == 3


def test_a_refused_device_is_not_measured_again_for_a_second_unless_it_confirms(
    home_qm: QueueManager, make_server: Callable[..., LiveServer], dead_store: QueueManager,
    device_qm: QueueManager, server_clock: ManualClock, network: Network, agent_of: Callable[..., SyncAgent],
    make_link: Callable[..., ServerLink],
) -> None:
    """Measuring a device costs in proportion to what it holds: at its quota, its puts
    are refused from memory for REFUSAL_MEMO_MS, and measured again after that, or as
    soon as it confirms some of what it holds."""
    server = make_server(home_qm, max_batch=10, holds=HoldPolicy(max_messages=20, max_bytes=None))
    fill(dead_store, 20)
    leave_unconfirmed(agent_of(dead_store, server), network)
    fill(device_qm, 3)
    agent = agent_of(device_qm, server)

    def measures(push: Callable[[], object]) -> int:
        seen: list[str] = []
        with home_qm.tracer(seen.append):
            push()
        return sum("min(arrived_ms)" in statement for statement in seen)

    assert (measures(agent.push_once) == 1
            and "over-quota" in (agent.last_push.error or ""))  # type: ignore[union-attr]
    assert (measures(agent.push_once) == 0
            and "over-quota" in (agent.last_push.error or ""))  # type: ignore[union-attr]
    server_clock.advance(REFUSAL_MEMO_MS)
    assert (measures(agent.push_once) == 1
            and "over-quota" in (agent.last_push.error or ""))  # type: ignore[union-attr]
    link = make_link(to=server, qm=dead_store)
    held = [str(m.uid) for m in dead_store.exchange.next_for_transmission("ORDERS", 10)]
    answer = link.call(p.PATH_CONFIRM, {"type": "confirm", "now_ms": T0, "queue": "ORDERS", "uids": held},
                       "confirm")
    assert {r["s"] for r in answer["results"]} == {"confirmed"}
    done = agent.push_once()  # no time passed: the confirm alone let it be measured again
    assert done.ok and done.transmitted == 3


def test_a_resend_of_what_a_device_holds_adds_nothing_to_its_quota(
    home_qm: QueueManager, make_server: Callable[..., LiveServer], device_qm: QueueManager,
    network: Network, agent_of: Callable[..., SyncAgent],
) -> None:
    server = make_server(home_qm, max_batch=10, holds=HoldPolicy(max_messages=20, max_bytes=None))
    sent = fill(device_qm, 20)
    agent = agent_of(device_qm, server)
    leave_unconfirmed(agent, network)
    puts = len(network.requests(p.PATH_PUT))
    leave_unconfirmed(agent, network)  # at its quota, it resends the same 20: replaced, not added
    assert len(network.requests(p.PATH_PUT)) == puts + 2
    assert "over-quota" not in (agent.last_push.error if agent.last_push else "")
    done = agent.push_once()
    assert done.ok and done.transmitted == 20
    assert [m.data for m in home_qm.browse("ORDERS")] == sent


def test_the_bytes_quota_counts_data_and_fields(
    home_qm: QueueManager, make_server: Callable[..., LiveServer], dead_store: QueueManager,
    device_qm: QueueManager, server_clock: ManualClock, network: Network, agent_of: Callable[..., SyncAgent],
) -> None:
    server = make_server(home_qm, holds=HoldPolicy(max_messages=None, max_bytes=1_000))
    fill(dead_store, 4, b"x" * 200)
    leave_unconfirmed(agent_of(dead_store, server), network)
    assert home_qm.exchange.held_usage("DEV1").bytes == 4 * 201
    device_qm.put("ORDERS", Message(b"y" * 150, fields={"note": "z" * 60}))
    refused = agent_of(device_qm, server).push_once()
    assert "over-quota" in (refused.error or "") and "(quota 1000)" in (refused.error or "")
    device_qm.purge("ORDERS")
    device_qm.put("ORDERS", Message(b"y" * 150))
    server_clock.advance(REFUSAL_MEMO_MS)
    assert agent_of(device_qm, server).push_once().transmitted == 1  # 954 bytes: within


def test_concurrent_puts_never_take_a_device_past_its_quota(
    home_qm: QueueManager, make_server: Callable[..., LiveServer], dead_store: QueueManager,
    make_link: Callable[..., ServerLink],
) -> None:
    """A stolen key can send puts in parallel: the device's puts are checked and stored
    one at a time, so exactly two of eight 10-message puts fit a quota of 20."""
    server = make_server(home_qm, holds=HoldPolicy(max_messages=20, max_bytes=None))
    fill(dead_store, 80)
    pending = dead_store.exchange.next_for_transmission("ORDERS", 80)
    batches = [pending[i:i + 10] for i in range(0, 80, 10)]
    links = [make_link(to=server, qm=dead_store) for _ in batches]
    for link in links:
        link.hello()
    outcomes: list[str] = []
    start = threading.Barrier(len(links))

    def put(link: ServerLink, batch: list[Message]) -> None:
        body = {"type": "put", "now_ms": T0, "queue": "ORDERS",
                "messages": [wm.WireMessage.from_message(m).to_wire() for m in batch]}
        start.wait(10)
        try:
            link.call(p.PATH_PUT, body, "put")
            outcomes.append("stored")
        except Unreachable as exc:
            outcomes.append("over-quota" if "over-quota" in str(exc) else str(exc))

    threads = [threading.Thread(target=put, args=pair) for pair in zip(links, batches, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["over-quota"] * 6 + ["stored"] * 2
    assert home_qm.exchange.held_usage("DEV1").messages == 20


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"EDGEQ_DB": None, "EDGEQ_NAME": None})


def store_of(path: Path, name: str, clock: ManualClock) -> QueueManager:
    qm = QueueManager(path, name=name, clock=clock)
    qm.define_remote_queue("ORDERS", target_qmgr="HOME")
    return qm


def test_edgeq_serve_holds_a_quota_and_the_operator_lists_and_clears_held_puts(
    tmp_path: Path, device_clock: ManualClock, network: Network, agent_of: Callable[..., SyncAgent],
) -> None:
    """A real `edgeq serve`: two devices' lost stores left 20 unconfirmed puts each, their
    quota; their new stores are refused (429 over-quota) until the operator clears that
    device's held puts. Its log is JSON lines only, with no terminal escapes."""
    home = tmp_path / "served.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    port = free_port()
    server = type("Served", (), {"url": f"http://127.0.0.1:{port}"})()
    stores = {f"{role}{n}": store_of(tmp_path / f"{role}{n}.db", f"DEV{n}", device_clock)
              for role in ("dead", "new") for n in (1, 2)}
    options = ("--no-auth", "--max-batch", "10", "--held-quota-messages", "20", "--hold", "2h")
    try:
        with edgeq_serve(home, port, *options) as lines:
            for n in (1, 2):
                fill(stores[f"dead{n}"], 20)
                leave_unconfirmed(agent_of(stores[f"dead{n}"], server), network)
            listed = run("server", "held", "list", "--db", str(home), "--json")
            assert listed.exit_code == 0, listed.output
            assert [(g["device"], g["queue"], g["messages"]) for g in json.loads(listed.stdout)] == [
                ("DEV1", "ORDERS", 20), ("DEV2", "ORDERS", 20)]
            mine = {n: fill(stores[f"new{n}"], 3) for n in (1, 2)}
            assert "over-quota" in (agent_of(stores["new1"], server).push_once().error or "")
            cleared = run("server", "held", "clear", "--device", "DEV2", "--db", str(home))
            assert cleared.exit_code == 0 and "Undid 20 unconfirmed put(s) of DEV2" in cleared.stdout
            assert agent_of(stores["new2"], server).push_once().transmitted == 3  # room again
            left = json.loads(run("server", "held", "list", "--db", str(home), "--json").stdout)
            assert [(g["device"], g["messages"]) for g in left] == [("DEV1", 20)]
    finally:
        for qm in stores.values():
            qm.close()
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    # JSON only, no ANSI
    assert len(logged) == len(lines) and not [line for line in lines if "\\u001b" in line]
    (serving,) = [e for e in logged if e["event"] == "serve"]
    assert (serving["hold_ms"], serving["held_quota_messages"]) == (7_200_000, 20)
    assert any(e["event"] == "over-quota" and e["device"] == "DEV1" for e in logged)
    with QueueManager(home) as qm:
        assert sorted(m.data for m in qm.browse("ORDERS")) == sorted(mine[2])


@pytest.mark.parametrize(("args", "needle"), [
    (["--hold", "soon"], "'soon' is not a duration"),
    (["--held-quota-messages", "9999"], "less than 2 x --max-batch (10000)"),
    (["--held-quota-bytes", "1MiB"], "less than 2 x --max-body-bytes"),
    (["--held-quota-bytes", "lots"], "'lots' is not a size"),
], ids=["hold", "messages", "bytes", "size"])
def test_edgeq_serve_refuses_bad_hold_and_quota_values_before_creating_anything(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    result = run("serve", "--db", str(tmp_path / "new.db"), "--name", "HOME", *args)
    assert result.exit_code == 2 and needle in result.stderr
    assert not (tmp_path / "new.db").exists()


def test_a_hold_policy_checks_its_values() -> None:
    assert HoldPolicy(hold_ms=None, max_messages=None, max_bytes=None).sweep_interval_s is None
    assert HoldPolicy(hold_ms=5_000).sweep_interval_s == 1.0
    with pytest.raises(ValueError, match="hold_ms must be a positive int"):
        HoldPolicy(hold_ms=0)
    with pytest.raises(TypeError, match="max_bytes must be a positive int or None"):
        HoldPolicy(max_bytes=1.5)  # type: ignore[arg-type]


def test_the_cheap_size_bound_is_never_below_the_stored_size() -> None:
    """The quota is checked against a bound first (encoding the fields costs ten times
    more); the exact size only when the bound does not fit, so the bound must hold."""
    from edgeq import Int32, Int64
    from edgeq.sync.server.holds import _incoming

    samples = [
        Message(b"x"), Message(b"", fields={"n": Int32(-(2**31))}),
        Message(b"ab", fields={"big": Int64(2**62)}),
        Message(b"", fields={"é" * 30: "ü€😀" * 100, "f": 1.5, "b": True, "raw": bytes(300)}),
        Message(b"y" * 1000, fields={f"k{i}": i % 2 == 0 for i in range(40)}),
    ]
    for message in samples:
        assert _incoming([message], exact=False) >= _incoming([message], exact=True) >= len(message.data)
