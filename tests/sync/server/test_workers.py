"""`edgeq serve --workers 2`: two server processes on one store and one socket. A signed
request replayed to the other worker is refused (nonces live in the nonce file, not in a
process), and devices pushing through both lose nothing and duplicate nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import cbor2
import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgeq import Message, QueueManager
from edgeq.clock import system_clock
from edgeq.sync import protocol as p
from edgeq.sync.agent.agent import SyncAgent
from edgeq.sync.agent.signer import DeviceSigner
from edgeq.sync.keys import public_bytes
from edgeq.sync.server.workers import console_argv, worker_argv
from tests.sync.conftest import edgeq_serve, free_port
from tests.sync.server.test_auth import CBOR, signed

DEVICES = ("DEV1", "DEV2", "DEV3", "DEV4")
#: new connections tried before concluding the kernel gives every one to the same worker
TRIES = 200
#: Linux's shortest delayed ACK (TCP_DELACK_MIN): what an answer held by Nagle's algorithm waits
DELAYED_ACK_S = 0.040


def _home(tmp_path: Path, keys: dict[str, Ed25519PrivateKey]) -> Path:
    home = tmp_path / "home.db"
    with QueueManager(home, name="HOME", journal="server") as qm:
        qm.define_queue("ORDERS")
        for name, key in keys.items():
            qm.register_device(name, public_bytes(key), queues=["ORDERS"])
    return home


def _worker_of(client: httpx.Client, url: str) -> str:
    """The worker holding ``client``'s (kept-alive) connection."""
    return client.get(url + "/healthz").headers["X-Edgeq-Worker"]


def _on_another_worker(url: str, than: str) -> httpx.Client:
    """A client whose connection a worker other than ``than`` accepted."""
    seen = set()
    for _ in range(TRIES):
        client = httpx.Client(timeout=10)
        worker = _worker_of(client, url)
        if worker != than:
            return client
        seen.add(worker)
        client.close()
    raise AssertionError(f"{TRIES} connections all went to worker {seen}: is --workers running two?")


def test_a_replay_is_refused_by_the_other_worker(tmp_path: Path) -> None:
    keys = {"DEV1": Ed25519PrivateKey.generate()}
    home, port = _home(tmp_path, keys), free_port()
    url = f"http://127.0.0.1:{port}"
    now = system_clock()
    raw, headers = signed(keys["DEV1"], "DEV1", p.PATH_HELLO,
                          {"type": "hello", "qmgr": "DEV1", "now_ms": now, "agent": "test"}, now_ms=now)
    with edgeq_serve(home, port, "--workers", "2"):
        with httpx.Client(timeout=10) as first:
            worker = _worker_of(first, url)
            assert first.post(url + p.PATH_HELLO, content=raw, headers={**CBOR, **headers}).status_code == 200
            again = first.post(url + p.PATH_HELLO, content=raw, headers={**CBOR, **headers})
            assert again.status_code == 401  # the same worker remembers it
        other = _on_another_worker(url, worker)
        try:
            replayed = other.post(url + p.PATH_HELLO, content=raw, headers={**CBOR, **headers})
        finally:
            other.close()
    assert replayed.status_code == 401 and "replayed" in cbor2.loads(replayed.content)["detail"]


def test_devices_push_through_both_workers_exactly_once(tmp_path: Path) -> None:
    keys = {name: Ed25519PrivateKey.generate() for name in DEVICES}
    home, port = _home(tmp_path, keys), free_port()
    url = f"http://127.0.0.1:{port}"
    sent: dict[str, set[str]] = {}
    workers: dict[str, set[str]] = {}
    errors: list[BaseException] = []

    def device(name: str) -> None:
        try:
            with QueueManager(tmp_path / f"{name}.db", name=name) as qm:
                qm.define_remote_queue("ORDERS", target_qmgr="HOME")
                uids: set[str] = set()
                for round_ in range(3):  # each round a new connection: a new worker, perhaps
                    uids |= {str(u)
                             for u in qm.put_many("ORDERS", [Message(b"%s-%d-%d" % (name.encode(), round_, i))
                                                             for i in range(150)])}
                    with httpx.Client(timeout=30, auth=DeviceSigner(name, keys[name])) as client:
                        workers.setdefault(name, set()).add(_worker_of(client, url))
                        agent = SyncAgent(qm, url, client=client, batch_size=50)
                        report = agent.push_once()
                        assert report.ok and report.transmitted == 150, report
                sent[name] = uids
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    with edgeq_serve(home, port, "--workers", "2"):
        threads = [threading.Thread(target=device, args=(name,)) for name in DEVICES]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors
    assert len(set().union(*workers.values())) == 2, f"every connection went to one worker: {workers}"
    with QueueManager(home) as qm:
        stored = [str(m.uid) for m in qm.browse("ORDERS")]
        accepted = [str(e.uid) for e in qm.journal_since(0) if e.kind == "accepted"]
    expected = set().union(*sent.values())
    assert len(expected) == 450 * len(DEVICES)
    assert len(stored) == len(set(stored)) == len(expected)  # 0 duplicated
    assert set(stored) == expected  # 0 lost
    assert sorted(accepted) == sorted(expected)


def test_each_worker_gets_the_command_without_workers() -> None:
    assert worker_argv(["serve", "--workers=3", "--port=0"], 7, 0, 8470) == ["serve", "--worker-fd", "7",
                                                                             "--port",
                                                                            "8470"]
    assert worker_argv(["serve", "--workers", "3"], 7, 2, 8470)[-2:] == ["--sweep-interval", "0"]


def test_with_the_console_each_process_is_told_its_socket_and_the_ports_bound() -> None:
    argv = ["--db", "h.db", "serve", "--console", "--port", "0", "--console-port", "0", "--workers", "2"]
    assert worker_argv(argv, 7, 0, 40001, 40002) == ["--db", "h.db", "serve", "--console", "--worker-fd", "7",
                                                     "--port", "40001", "--console-port", "40002"]
    assert console_argv(argv, 8, 40002) == ["--db", "h.db", "serve", "--console", "--console-fd", "8",
                                            "--console-port", "40002"]


def test_a_worker_answers_without_waiting_on_delayed_acks(tmp_path: Path) -> None:
    """uvicorn took the inherited socket for a Unix one (``fd=``), so asyncio left Nagle's
    algorithm on: each answer's body waited for the client's delayed ACK, 40 ms at least on
    Linux, every request. A worker's socket is a TCP one now: answers go at once."""
    home, port = tmp_path / "home.db", free_port()
    QueueManager(home, name="HOME").close()
    url = f"http://127.0.0.1:{port}"
    with edgeq_serve(home, port, "--workers", "2", "--no-auth"), httpx.Client(timeout=10) as http:
        took = []
        for _ in range(20):  # one kept-alive connection: one worker
            body = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": system_clock()})
            started = time.perf_counter()
            assert http.post(url + p.PATH_HELLO, content=body, headers=CBOR).status_code == 200
            took.append(time.perf_counter() - started)
    assert min(took) < DELAYED_ACK_S, f"every hello took a delayed ACK or more: {sorted(took)}"
