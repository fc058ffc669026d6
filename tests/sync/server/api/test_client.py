"""The CLI's remote mode (``--server URL --token-file F``) against a real ``edgeq serve --console`` (one
per module), its tokens made by the real CLI: each remote command prints what the local one does on
the same store, a viewer's action is refused and changes nothing, and bad credentials are refused."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgeq import Int32, Int64, Message, MessageUID, QueueManager
from edgeq.sync.keys import fingerprint, new_key_pair
from edgeq.sync.server.api.audit import recorded
from edgeq.sync.server.console.auth import set_password
from tests.sync.conftest import EDGEQ, ServedConsole, edgeq_serve_console

DLQ = "SYSTEM.DEAD.LETTER.QUEUE"


def edgeq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EDGEQ, *args], capture_output=True, text=True, timeout=60, env=env)


@dataclass
class Served:
    console: ServedConsole
    db: Path
    tokens: dict[str, Path]  # role -> its token file
    dead: list[str]

    def local(self, *args: str) -> subprocess.CompletedProcess[str]:
        return edgeq("--db", str(self.db), *args)

    def remote(self, *args: str, role: str = "viewer") -> subprocess.CompletedProcess[str]:
        return edgeq(*args, "--server", self.console.console_url, "--token-file", str(self.tokens[role]))


def _fill(db: Path) -> list[str]:
    """Queues with messages, dead letters, devices, refusals and parked rule failures."""
    with QueueManager(db, name="HOME") as qm:
        qm.define_queue("ORDERS")
        qm.put_many("ORDERS", [Message(b"order %d" % i) for i in range(4)])
        qm.define_queue("PURGEME")
        qm.put_many("PURGEME", [Message(b"p")] * 3)
        qm.define_queue("METRICS")
        qm.define_remote_queue("OUT", target_qmgr="ELSEWHERE", refusal_limit=1)
        dead = [str(qm.put("OUT", Message(b"reading %d" % i))) for i in range(2)]
        qm.exchange.refused("OUT", [(u, "no-queue: ELSEWHERE has no queue OUT") for u in dead])
        for i, name in enumerate(("DEV1", "DEV2")):
            qm.register_device(name, bytes([i + 1]) * 32, queues=["ORDERS"] if i else None)
        qm.exchange.record_refusals("DEV1", "ORDERS", {"no-queue": (2, "no queue ORDERS")})
        qm.exchange.record_refusals("DEV2", "OTHER", {"too-large": (1, "too large")})
        qm.define_queue("MIXED", rules=["counters"])  # priority order; every field type; data cut short
        now = int(time.time() * 1000)
        qm.put_many("MIXED", [
            Message(b"low", priority=1),
            Message(b"x" * 700, priority=9, fields={"n": Int32(5), "big": Int64(2**40), "f": 1.5, "inf":
                    float("inf"), "raw": b"\x00\xff", "ok": True, "s": "text"}),
            Message(bytes(range(256)) * 2, correlation_id=b"\x01\x02", reply_to="REPLIES",
                    expiry=Int32(864_000_000)),
            Message(b"line one\nline two", expiry=Int64(now + 864_000_000)),
        ])
        qm.define_queue("INBOX")
    days_ago = now - 3 * 86_400_000  # held that long: their age reads the same to two processes ("3d 0h")
    with QueueManager(db, clock=lambda: days_ago) as qm:  # puts devices left unconfirmed
        for device, n in (("DEV1", 2), ("DEV2", 1)):
            held = [Message(b"held", uid=MessageUID(f"{device}:aaaa", 1000 + i), created_ms=days_ago)
                    for i in range(n)]
            assert {r.status for r in qm.put_each("INBOX", held, confirm_id=7)} == {"stored"}
    (db.parent / "fail").touch()  # tests.rulekit:Failing raises while it exists
    with QueueManager(db, rule_retry_limit=1) as qm:  # each failed delivery parked at once
        qm.define_queue("RULED", rules=[("tests.rulekit:Failing", {"switch": str(db.parent / "fail")})])
        qm.put_many("RULED", [Message(b"r", expiry=Int64(1))] * 2)
    return dead


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("remote")
    db = home / "home.db"
    dead = _fill(db)
    set_password(db, "operator-pass-1")  # edgeq serve --console needs one
    tokens = {}
    for role in ("viewer", "operator"):
        made = edgeq("server", "token", "create", "--name", f"cli-{role}", "--role", role, "--db", str(db))
        assert made.returncode == 0, made.stderr
        tokens[role] = home / f"{role}.token"
        tokens[role].write_text(made.stdout)
        tokens[role].chmod(0o600)
    with edgeq_serve_console(db, "--hold", "none") as console:  # the held puts stay until cleared
        yield Served(console, db, tokens, dead)


def _same(local: subprocess.CompletedProcess[str], remote: subprocess.CompletedProcess[str]) -> None:
    assert (remote.returncode, remote.stdout, remote.stderr) == (local.returncode, local.stdout, local.stderr)


@pytest.mark.parametrize("args", [
    ("server", "devices", "list"), ("server", "devices", "list", "--json"),
    ("server", "refusals", "list", "--device", "DEV1", "--json"),
    ("rules", "failures", "--parked"), ("rules", "failures", "--json"), ("depth", "ORDERS", "--json"),
    ("queue", "list"), ("queue", "list", "--json"), ("queue", "show", "RULED"),
    ("browse", "MIXED"), ("browse", "ORDERS", "--json"), ("browse", "MIXED", "--limit", "2"),
    ("browse", "METRICS"), ("dlq", "browse"), ("dlq", "browse", "--queue", "OUT", "--json", "--limit", "1"),
    ("dlq", "browse", "--queue", "ORDERS"), ("queue", "stats", "MIXED"),
    ("queue", "stats", "MIXED", "--json"), ("queue", "stats", "ORDERS"), ("server", "held", "list"),
    ("server", "held", "list", "--device", "DEV2"),
    ("server", "held", "list", "--older-than", "1h"), ("server", "held", "list", "--older-than", "4d"),
])
def test_a_remote_reading_prints_what_the_local_one_does(served: Served, args: tuple[str, ...]) -> None:
    with ThreadPoolExecutor(2) as both:  # two processes at once: the module stays quick
        local, remote = both.submit(served.local, *args), both.submit(served.remote, *args)
    assert local.result().returncode == 0 and local.result().stdout.strip(), local.result().stderr
    _same(local.result(), remote.result())


def test_a_viewer_s_action_is_refused_and_changes_nothing(served: Served) -> None:
    for args, says in ((("purge", "PURGEME"), "purge-queue needs the operator role"),
                       (("server", "devices", "revoke", "DEV1"), "revoke-device needs the operator role"),
                       (("dlq", "delete", served.dead[0]), "delete-dead-letter needs the operator role")):
        refused = served.remote(*args)
        assert refused.returncode == 1 and refused.stdout == "", refused
        assert "answered 403" in refused.stderr and says in refused.stderr
        assert "needs an operator's token" in refused.stderr
    assert served.local("depth", "PURGEME").stdout == "3\n"
    assert json.loads(served.local("server", "devices", "list", "--json").stdout)[0]["revoked_ms"] is None
    assert json.loads(served.local("depth", DLQ, "--json").stdout)["depth"] == 2


def test_an_operator_s_actions_are_done(served: Served) -> None:
    purged = served.remote("purge", "PURGEME", role="operator")
    assert (purged.returncode, purged.stdout) == (0, "Purged 3 message(s) from PURGEME.\n")
    assert served.local("depth", "PURGEME").stdout == "0\n"

    revoked = served.remote("server", "devices", "revoke", "DEV2", role="operator")
    when = json.loads(served.local("server", "devices", "list", "--json").stdout)[1]["revoked"]
    assert (revoked.returncode, revoked.stdout) == (0, f"Revoked DEV2 at {when}.\n")
    _same(served.local("server", "devices", "revoke", "DEV2"),
          served.remote("server", "devices", "revoke", "DEV2", role="operator"))

    resent = served.remote("dlq", "resend", served.dead[0], role="operator")
    assert (resent.returncode, resent.stdout) == (0, f"Re-sent 1 message(s) from dead-letter queue {DLQ}.\n")
    deleted = served.remote("dlq", "delete", served.dead[1], "--json", role="operator")
    assert json.loads(deleted.stdout) == {"deleted": 1, "queue": DLQ}
    assert served.local("depth", DLQ).stdout == "0\n"


def test_what_is_not_there_is_a_clear_error(served: Served) -> None:
    for args, says in ((("server", "devices", "revoke", "NOSUCH"), "no device 'NOSUCH'"),
                       (("purge", "NOSUCH"), "NOSUCH"), (("depth", "NOSUCH"), "NOSUCH"),
                       (("dlq", "delete", "X/../../queues/ORDERS/purge"), "no endpoint")):
        missing = served.remote(*args, role="operator")
        assert missing.returncode == 1, missing
        assert "answered 404" in missing.stderr and says in missing.stderr
    assert served.local("depth", "ORDERS").stdout == "4\n"  # a uid with '/' reached no other endpoint


def test_a_bad_token_or_a_loose_token_file_is_refused(served: Served, tmp_path: Path) -> None:
    forged = tmp_path / "forged.token"
    forged.write_text(served.tokens["operator"].read_text().strip()[:-4] + "0000\n")
    forged.chmod(0o600)
    refused = edgeq("purge", "ORDERS", "--server", served.console.console_url, "--token-file", str(forged))
    assert refused.returncode == 1 and "answered 401" in refused.stderr
    assert "unknown or revoked" in refused.stderr and "--token-file or $EDGEQ_TOKEN" in refused.stderr

    loose = tmp_path / "loose.token"
    loose.write_text(served.tokens["operator"].read_text())
    loose.chmod(0o644)
    refused = edgeq("purge", "ORDERS", "--server", served.console.console_url, "--token-file", str(loose))
    assert refused.returncode == 1
    assert f"the token file {loose} is readable by others (mode 644): run chmod 600" in refused.stderr
    assert served.local("depth", "ORDERS").stdout == "4\n"


def test_the_token_may_come_from_edgeq_token(served: Served) -> None:
    env = {**os.environ, "EDGEQ_TOKEN": served.tokens["viewer"].read_text().strip()}
    read = edgeq("depth", "ORDERS", "--server", served.console.console_url, env=env)
    assert (read.returncode, read.stdout) == (0, "4\n")
    none = edgeq("depth", "ORDERS", "--server", served.console.console_url,
                 env={k: v for k, v in env.items() if k != "EDGEQ_TOKEN"})
    assert none.returncode == 1 and "no token: give --token-file F or set EDGEQ_TOKEN" in none.stderr


def test_a_remote_browse_in_json_is_the_local_one(served: Served) -> None:
    """Every field of every message, the time left aside (each process reads its own clock)."""
    def shown(run: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
        assert run.returncode == 0, run.stderr
        found = json.loads(run.stdout)
        for message in found:
            assert message.pop("remaining_expiry_ms") is None or message["expiry"] is not None
        return list(found)

    local = shown(served.local("browse", "MIXED", "--json"))
    remote = shown(served.remote("browse", "MIXED", "--json"))
    assert [m["priority"] for m in remote] == [9, 4, 4, 1] and len(remote[0]["data_text"]) == 700
    assert remote == local


def test_a_remote_held_list_in_json_is_the_local_one(served: Served) -> None:
    def shown(run: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
        assert run.returncode == 0, run.stderr
        return [{k: v for k, v in g.items() if k != "age_ms"} for g in json.loads(run.stdout)]

    remote = shown(served.remote("server", "held", "list", "--json"))
    assert [(g["device"], g["messages"]) for g in remote] == [("DEV1", 2), ("DEV2", 1)]
    assert remote == shown(served.local("server", "held", "list", "--json"))


@pytest.mark.parametrize(("args", "says"), [
    (("browse", "MIXED", "--field", "n:int32=5"), "--field is not available with --server"),
    (("rules", "retry"), "with --server, give --parked --event ID"),
    (("rules", "retry", "--event", "1"), "with --server, give --parked --event ID"),
])
def test_an_option_the_api_cannot_honour_is_refused(served: Served, args: tuple[str, ...], says: str) -> None:
    refused = served.remote(*args, role="operator")
    assert (refused.returncode, refused.stdout) == (2, "") and says in refused.stderr


@pytest.mark.parametrize("args", [
    ("server", "set-console-password"), ("server", "token", "list"), ("server", "console-user", "list"),
])
def test_a_command_on_the_store_s_credentials_refuses_server(served: Served, args: tuple[str, ...]) -> None:
    refused = served.remote(*args)
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"edgeq {' '.join(args)} is not available remotely: it manages the store's own credentials" in (
        refused.stderr)


def test_server_and_db_together_or_more_than_one_uid_are_refused(served: Served) -> None:
    both = served.remote("server", "devices", "list", "--db", str(served.db))
    assert both.returncode == 2 and "give --server URL (a remote store) or --db PATH" in both.stderr
    every = served.remote("dlq", "delete", "--all", role="operator")
    assert every.returncode == 2 and "--all and --queue are not available remotely yet" in every.stderr


def test_an_operator_registers_rekeys_and_changes_queues_remotely(served: Served, tmp_path: Path) -> None:
    keys = {name: new_key_pair(tmp_path / f"{name}.key") for name in ("a", "b")}

    def devices(*args: str, role: str = "operator") -> subprocess.CompletedProcess[str]:
        return served.remote("server", "devices", *args, role=role)

    added = devices("add", "DEV5", "--public-key", str(keys["a"].public_path), "--queues", "ORDERS")
    assert (added.returncode, added.stdout) == (
        0, f"Registered DEV5 ({fingerprint(keys['a'].public_key)}), may push to ORDERS.\n"), added.stderr
    shared = devices("add", "DEV6", "--public-key", str(keys["a"].public_path))
    assert shared.returncode == 1 and "answered 409" in shared.stderr
    assert "registered to DEV5" in shared.stderr
    forced = devices("add", "DEV6", "--public-key", str(keys["a"].public_path), "--force")
    assert forced.returncode == 0
    assert f"Warning: the key in {keys['a'].public_path} is also registered to DEV5" in forced.stderr
    rekeyed = devices("rekey", "DEV5", "--public-key", str(keys["b"].public_path))
    assert rekeyed.stdout == (f"Re-keyed DEV5 ({fingerprint(keys['b'].public_key)}); requests signed "
                              "with its old key are refused.\n")
    none = devices("set-queues", "DEV5", "--none")
    assert none.stdout == "DEV5 may push to no queue from its next request.\n"
    refused = devices("set-queues", "DEV5", "--any", role="viewer")
    assert refused.returncode == 1 and "set-device-queues needs the operator role" in refused.stderr
    listed = {d["name"]: d for d in json.loads(served.local("server", "devices", "list", "--json").stdout)}
    assert listed["DEV5"]["queues"] == [] and listed["DEV6"]["queues"] is None
    local = devices("add", "DEV7", "--public-key", str(keys["b"].public_path), "--create", "--force")
    assert local.returncode == 2
    assert "--create and --name make a local store: not with --server" in local.stderr


def test_held_clear_is_an_operator_s_and_undoes_what_the_local_one_would(served: Served) -> None:
    refused = served.remote("server", "held", "clear", "--device", "DEV1")
    assert refused.returncode == 1 and refused.stdout == ""
    assert "answered 403" in refused.stderr and "clear-held needs the operator role" in refused.stderr
    assert json.loads(served.local("depth", "INBOX", "--json").stdout)["depth"] == 3  # nothing undone

    young = served.remote("server", "held", "clear", "--older-than", "4d", "--json", role="operator")
    assert json.loads(young.stdout) == {"undone": 0, "device": None, "older_than_ms": 4 * 86_400_000}
    cleared = served.remote("server", "held", "clear", "--device", "DEV1", role="operator")
    assert (cleared.returncode, cleared.stdout) == (
        0, "Undid 2 unconfirmed put(s) of DEV1; a device's resend is stored afresh.\n"), cleared.stderr
    left = served.remote("server", "held", "list", "--json")
    assert [(g["device"], g["messages"]) for g in json.loads(left.stdout)] == [("DEV2", 1)]
    _same(served.local("server", "held", "clear", "--device", "DEV1", "--json"),
          served.remote("server", "held", "clear", "--device", "DEV1", "--json", role="operator"))
    done = recorded(served.db, before=None, limit=10, action="clear-held")
    assert [(a["role"], a["outcome"], a["target"]) for a in reversed(done)] == [
        ("viewer", "refused", "DEV1 older than 0 ms"), ("operator", "done", "* older than 345600000 ms"),
        ("operator", "done", "DEV1 older than 0 ms"), ("operator", "done", "DEV1 older than 0 ms")]


def test_rules_retry_remotely_retries_one_parked_event(served: Served) -> None:
    parked = json.loads(served.local("rules", "failures", "--parked", "--json").stdout)
    first, second = (str(f["event_id"]) for f in parked)
    refused = served.remote("rules", "retry", "--parked", "--event", first)
    assert refused.returncode == 1 and "retry-rule-event needs the operator role" in refused.stderr
    (served.db.parent / "fail").unlink()  # the rule delivers from now on
    retried = served.remote("rules", "retry", "--parked", "--event", first, role="operator")
    assert (retried.returncode, retried.stdout) == (0, "Retried: 1 delivery succeeded.\nStill failing: 0 "
                                                       "waiting, 1 parked (see `edgeq rules failures`).\n")
    _same(served.local("rules", "failures", "--json"), served.remote("rules", "failures", "--json"))
    again = served.remote("rules", "retry", "--parked", "--event", first, role="operator")
    assert again.returncode == 1 and "answered 404" in again.stderr
    assert f"rule event {first} has no parked delivery" in again.stderr
    last = served.remote("rules", "retry", "--parked", "--event", second, "--json", role="operator")
    assert json.loads(last.stdout) == {"succeeded": 1, "waiting": 0, "parked": 0}
