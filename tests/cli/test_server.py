"""``edgeq server``: the device registry (shared keys refused, a missing store offered
to be created, revocations dated) and the held puts an operator lists and clears."""

from __future__ import annotations

import json
import time
from itertools import count
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from edgeq import ManualClock, Message, MessageUID, QueueManager
from edgeq.cli import cli
from edgeq.cli.format import format_time

_stamps = count(1_000)
HOUR = 3_600_000


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input, env={"EDGEQ_DB": None, "EDGEQ_NAME": None})


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home.db"
    with QueueManager(path, name="HOME") as qm:
        qm.define_queue("ORDERS")
        qm.define_queue("TELEMETRY")
    return path


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """Public key files of two devices, as `edgeq keys new` writes them."""
    out = {}
    for name in ("dev1", "dev2"):
        assert run("keys", "new", "--out", str(tmp_path / f"{name}.key")).exit_code == 0
        out[name] = tmp_path / f"{name}.pub"  # dev1.key -> dev1.pub, as docs/cli.md says
    return out


def add(home: Path, name: str, key: Path, *more: str, input: str | None = None) -> Result:
    return run("server", "devices", "add", name, "--public-key", str(key), "--db", str(home), *more,
               input=input)


# -- devices -----------------------------------------------------------------------------


def test_a_key_registered_to_another_device_is_refused_without_force(
    home: Path, keys: dict[str, Path]
) -> None:
    assert add(home, "DEV1", keys["dev1"]).exit_code == 0
    shared = add(home, "DEV2", keys["dev1"])
    assert shared.exit_code == 1
    assert "is already registered to DEV1" in shared.stderr and "--force" in shared.stderr
    with QueueManager(home) as qm:
        assert qm.device("DEV2") is None
    assert add(home, "DEV1", keys["dev1"]).exit_code == 0  # re-adding the same device is no sharing
    forced = add(home, "DEV2", keys["dev1"], "--force")
    assert (forced.exit_code == 0 and "Warning: the key in" in forced.stderr
            and "also registered to DEV1" in forced.stderr)
    with QueueManager(home) as qm:
        assert (qm.device("DEV2") is not None
                and qm.device("DEV2").public_key == qm.device("DEV1").public_key)  # type: ignore[union-attr]


def test_a_revoked_devices_key_is_refused_too_and_the_refusal_dates_the_revocation(
    home: Path, keys: dict[str, Path]
) -> None:
    add(home, "DEV1", keys["dev1"])
    run("server", "devices", "revoke", "DEV1", "--db", str(home))
    with QueueManager(home) as qm:
        revoked = qm.device("DEV1").revoked_at  # type: ignore[union-attr]
    assert revoked is not None
    reused = add(home, "DEV3", keys["dev1"])
    assert reused.exit_code == 1 and f"DEV1 (revoked {revoked})" in reused.stderr


def test_revocations_print_iso_dates_never_epoch_ms(home: Path, keys: dict[str, Path]) -> None:
    add(home, "DEV1", keys["dev1"])
    revoked = run("server", "devices", "revoke", "DEV1", "--db", str(home))
    with QueueManager(home) as qm:
        when = format_time(qm.device("DEV1").revoked_ms)  # type: ignore[arg-type, union-attr]
    assert revoked.exit_code == 0 and revoked.stdout == f"Revoked DEV1 at {when}.\n"
    again = run("server", "devices", "revoke", "DEV1", "--db", str(home))
    assert again.exit_code == 0 and again.stdout == f"DEV1 was already revoked at {when}; nothing changed.\n"
    listed = run("server", "devices", "list", "--db", str(home))
    assert f"revoked {when}" in listed.stdout
    (entry,) = json.loads(run("server", "devices", "list", "--db", str(home), "--json").stdout)
    assert entry["revoked"] == when and isinstance(entry["revoked_ms"], int)


def test_rekey_keeps_the_queues_and_lifts_a_revocation(home: Path, keys: dict[str, Path]) -> None:
    add(home, "DEV1", keys["dev1"], "--queues", "ORDERS")
    run("server", "devices", "revoke", "DEV1", "--db", str(home))
    rekeyed = run("server", "devices", "rekey", "DEV1", "--public-key", str(keys["dev2"]), "--db", str(home))
    with QueueManager(home) as qm:
        after = qm.device("DEV1")
    assert after is not None and (after.queues, after.revoked_ms) == (("ORDERS",), None)
    assert rekeyed.exit_code == 0 and rekeyed.stdout.startswith("Re-keyed DEV1 (SHA256:")
    unknown = run("server", "devices", "rekey", "DEV9", "--public-key", str(keys["dev1"]), "--db", str(home))
    assert unknown.exit_code == 1 and "no device 'DEV9' is registered here" in unknown.stderr


def test_set_queues_takes_a_list_any_or_none(home: Path, keys: dict[str, Path]) -> None:
    add(home, "DEV1", keys["dev1"])

    def set_queues(*args: str) -> Result:
        return run("server", "devices", "set-queues", "DEV1", *args, "--db", str(home))

    listed = set_queues("--queue", "ORDERS", "--queue", "TELEMETRY")
    assert listed.stdout == "DEV1 may push to ORDERS, TELEMETRY from its next request.\n"
    assert set_queues("--none").stdout == "DEV1 may push to no queue from its next request.\n"
    with QueueManager(home) as qm:
        assert qm.device("DEV1").queues == ()  # type: ignore[union-attr]
    assert set_queues("--any").stdout == "DEV1 may push to any queue from its next request.\n"
    for wrong in ((), ("--any", "--none"), ("--queue", "ORDERS", "--any")):
        refused = set_queues(*wrong)
        assert refused.exit_code == 2 and "one of them" in refused.stderr
    with QueueManager(home) as qm:
        assert qm.device("DEV1").queues is None  # type: ignore[union-attr]


def test_a_missing_store_is_created_when_the_operator_says_yes(tmp_path: Path, keys: dict[str, Path]) -> None:
    new = tmp_path / "new.db"
    declined = add(new, "DEV1", keys["dev1"], input="n\n")
    assert (declined.exit_code == 1
            and "does not exist. Create a new home server store there?" in declined.stderr)
    assert "Error: " + f"{new} does not exist, and nothing was created" in declined.stderr
    assert add(new, "DEV1", keys["dev1"], input="").exit_code == 1  # no answer (a script): no
    assert not new.exists()
    accepted = add(new, "DEV1", keys["dev1"], input="y\nHOME2\n")
    assert accepted.exit_code == 0, accepted.output
    assert f"Created store {new} for queue manager HOME2." in accepted.stderr
    with QueueManager(new) as qm:
        assert qm.name == "HOME2" and qm.device("DEV1") is not None


def test_create_makes_the_store_without_asking(tmp_path: Path, keys: dict[str, Path]) -> None:
    for flag, path in (("--create", tmp_path / "a.db"), ("--yes", tmp_path / "b.db")):
        made = add(path, "DEV1", keys["dev1"], flag, "--name", "HOME")
        assert made.exit_code == 0, made.output
        with QueueManager(path) as qm:
            assert qm.name == "HOME" and qm.device("DEV1") is not None
    unnamed = add(tmp_path / "c.db", "DEV1", keys["dev1"], "--create")
    assert unnamed.exit_code == 1 and "--name" in unnamed.stderr and not (tmp_path / "c.db").exists()


def test_other_admin_commands_still_need_an_existing_store(tmp_path: Path) -> None:
    for args in (["devices", "list"], ["devices", "revoke", "DEV1"], ["held", "list"], ["held", "clear"]):
        missing = run("server", *args, "--db", str(tmp_path / "absent.db"))
        assert missing.exit_code == 1 and "does not exist" in missing.stderr
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["devices", "add", "DEV.1", "--public-key", "{dev1}"], "has a '.'"),
    (["devices", "add", "no spaces", "--public-key", "{dev1}"], "device name 'no spaces' is not valid"),
    (["devices", "add", "DEV1", "--public-key", "{junk}"], "is not a PEM public key"),
    (["devices", "add", "DEV1", "--public-key", "{dev1}", "--queues", "A,b c"],
     "queue name 'b c' is not valid"),
    (["devices", "add", "DEV1", "--public-key", "{dev1}", "--name", "H!"],
     "queue manager name 'H!' is not valid"),
    (["devices", "revoke", "DEV.1"], "has a '.'"),
    (["held", "list", "--device", "D 1"], "device name 'D 1' is not valid"),
    (["held", "list", "--older-than", "a while"], "is not a duration"),
    (["held", "clear", "--older-than", "-5m"], "is not a duration"),
], ids=["dotted", "spaces", "not-a-key", "queues", "server-name", "revoke", "device", "older", "negative"])
def test_a_bad_value_is_a_usage_error(
    home: Path, keys: dict[str, Path], tmp_path: Path, args: list[str], needle: str
) -> None:
    junk = tmp_path / "junk.pub"
    junk.write_text("hello")
    filled = [a.format(dev1=keys["dev1"], junk=junk) for a in args]
    result = run("server", *filled, "--db", str(home))
    assert result.exit_code == 2 and needle in result.stderr, result.output


# -- held puts ---------------------------------------------------------------------------


def hold(home: Path, at_ms: int, origin: str, queue: str, n: int) -> None:
    """``n`` puts of ``origin`` arrived at ``at_ms`` and left unconfirmed."""
    with QueueManager(home, clock=ManualClock(at_ms)) as qm:
        batch = [Message(b"abcd", uid=MessageUID(origin, next(_stamps)), created_ms=at_ms) for _ in range(n)]
        assert {r.status for r in qm.put_each(queue, batch, confirm_id=5)} == {"stored"}


@pytest.fixture
def held(home: Path) -> int:
    """DEV1 left 3 puts on ORDERS 2 hours ago and 1 on TELEMETRY just now; DEV2 2, an hour ago."""
    now = int(time.time() * 1000)
    hold(home, now - 2 * HOUR, "DEV1:aaaa", "ORDERS", 3)
    hold(home, now - HOUR, "DEV2:bbbb", "ORDERS", 2)
    hold(home, now, "DEV1:cccc", "TELEMETRY", 1)
    return now


def test_held_list_shows_each_devices_unconfirmed_puts_by_queue(home: Path, held: int) -> None:
    text = run("server", "held", "list", "--db", str(home))
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["DEVICE", "QUEUE", "MESSAGES", "BYTES", "OLDEST"]
    assert lines[1].split()[:6] == ["DEV1", "ORDERS", "3", "12", "B", format_time(held - 2 * HOUR)]
    assert lines[1].endswith("(2h 0m ago)")
    assert [line.split()[:3] for line in lines[2:]] == [["DEV1", "TELEMETRY", "1"], ["DEV2", "ORDERS", "2"]]
    data = json.loads(run("server", "held", "list", "--device", "DEV2", "--json", "--db", str(home)).stdout)
    assert data == [{"device": "DEV2", "queue": "ORDERS", "messages": 2, "bytes": 8, "oldest_ms": held - HOUR,
                     "oldest": format_time(held - HOUR), "age_ms": data[0]["age_ms"]}]
    assert HOUR <= data[0]["age_ms"] < HOUR + 60_000
    old = json.loads(run("--json", "server", "held", "list", "--older-than", "90m", "--db", str(home)).stdout)
    assert [(g["device"], g["messages"]) for g in old] == [("DEV1", 3)]


def test_held_clear_undoes_by_device_and_age_and_the_list_empties(home: Path, held: int) -> None:
    older = run("server", "held", "clear", "--older-than", "90m", "--db", str(home))
    assert older.stdout == "Undid 3 unconfirmed put(s) of every device, held 1h 30m or longer; " \
                           "a device's resend is stored afresh.\n"
    mine = json.loads(run("server", "held", "clear", "--device", "DEV2", "--json", "--db", str(home)).stdout)
    assert mine == {"undone": 2, "device": "DEV2", "older_than_ms": 0}
    assert run("server", "held", "clear", "--db", str(home)).stdout.startswith(
        "Undid 1 unconfirmed put(s) of every")
    assert run("server", "held", "list", "--db", str(home)).stdout == "No unconfirmed puts are held.\n"
    with QueueManager(home) as qm:
        assert qm.depth("ORDERS") == qm.depth("TELEMETRY") == 0
