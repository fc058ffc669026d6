"""What hostile input costs a real ``edgeq serve`` on loopback (issue 29): the figures in
docs/security.md, "What a hostile client can cost the server".

``bomb``: 48 zstd bodies of 54 bytes, each decompressing to a CBOR array of 999,990 empty
arrays, sent by 16 concurrent clients, to an open server and (signed by a registered
device) to a signed one, while a probe asks ``/healthz`` over and over: its latencies
idle and under the barrage, the server's peak memory over its resident size before; and
48 ordinary hellos sent the same way, what any such barrage costs (``hellos``).

``flood``: 80 wrong console logins from 40 concurrent clients (each from its own loopback
address, the harder case for the per-address delays: one address is refused at once after
its first wrong password) sent to the console's port (``edgeq serve --console``: a process
of its own), while a device says hello over and over on the devices' port: its hello
latencies idle and under the flood, each process's CPU and peak memory.

Run: ``.venv/bin/python -m benchmarks.hostile`` (``bomb`` or ``flood`` for one; ``--rounds N``:
N attacks one after the other, for more probes under attack; ``--pin``: the server and the
probe on the first CPU, the attacking clients on the others, as when they are other hosts).
Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peers.mqtt_peer import free_port
from edgeq import QueueManager
from edgeq.clock import system_clock
from edgeq.encoding.compression import compress
from edgeq.sync import protocol as p
from edgeq.sync.framing import H_ENCODING
from edgeq.sync.keys import load_private_key, new_key_pair
from edgeq.sync.server.console.auth import set_password
from edgeq.sync.signing import sign_headers

__all__ = ["main"]

BOMB_ITEMS = 999_990
BOMBS, BOMB_CLIENTS = 48, 16
LOGINS, LOGIN_CLIENTS = 80, 40
PROBES_IDLE = 200


def bomb_body() -> bytes:
    """The 54-byte zstd frame of an array of :data:`BOMB_ITEMS` empty arrays."""
    return compress("zstd", b"\x9a" + BOMB_ITEMS.to_bytes(4, "big") + b"\x80" * BOMB_ITEMS)


def _kib(pid: int, field: str) -> int:
    """A ``VmRSS``/``VmHWM`` figure of process ``pid`` (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin() -> None:
    """Put this thread on the first CPU, so that the server and the probe (children started
    from it) run there; the attackers' threads move to the others (:func:`_attacker`)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    os.sched_setaffinity(0, {cpus[0]})


def _attacker() -> None:
    """An attacking thread's initializer: onto the CPUs ``pin`` left (unpinned: all, unchanged)."""
    others = set(range(os.cpu_count() or 1)) - os.sched_getaffinity(0)
    if others:
        os.sched_setaffinity(0, others)


def _children(pid: int) -> list[int]:
    """The pids of process ``pid``'s children (``edgeq serve --console``'s supervisor: its workers)."""
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


@contextmanager
def serve(home: Path, *extra: str, listeners: int = 1) -> Iterator[tuple[str, int]]:
    """``edgeq serve`` over ``home`` on a free loopback port, once ``listeners`` processes listen
    (2 with ``--console``): (its URL, its pid)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "edgeq", "serve", "--db", str(home), "--port", str(port),
                             "--sweep-interval", "0", *extra], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        running = 0
        for line in proc.stderr:
            running += "Uvicorn running" in line
            if running == listeners:
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        if not ready.wait(60) or proc.poll() is not None:
            raise RuntimeError("edgeq serve did not start")
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def _percentiles(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    pick = (lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]) if ordered else (lambda q: 0.0)
    return {"n": len(ordered), "p50_ms": round(pick(0.5), 1), "p99_ms": round(pick(0.99), 1),
            "max_ms": round(ordered[-1] if ordered else 0.0, 1)}


def _call(kind: str, http: httpx.Client, url: str) -> int:
    """One probe: ``/healthz``, or a device's hello."""
    if kind == "healthz":
        return http.get(url + "/healthz").status_code
    body = p.encode_body({"type": "hello", "qmgr": "DEV1", "now_ms": system_clock()})
    return http.post(url + p.PATH_HELLO, content=body, headers={"content-type": p.CONTENT_TYPE}).status_code


def _probe(kind: str, url: str, stop: threading.Event, limit: int | None = None) -> list[float]:
    """Latencies (ms) of probes of ``kind`` over and over until ``stop`` (or ``limit`` calls)."""
    out: list[float] = []
    with httpx.Client(timeout=60) as http:
        while not stop.is_set() and (limit is None or len(out) < limit):
            started = time.perf_counter()
            status = _call(kind, http, url)
            out.append((time.perf_counter() - started) * 1000)
            if status >= 500:
                raise RuntimeError(f"probe answered {status}")
    return out


def probe_child(kind: str, url: str, count: str) -> int:
    """The prober's process (its own GIL, apart from the attack's clients): ``count`` probes
    (0: until its stdin closes), then prints the latencies (a JSON list)."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    _probe(kind, url, threading.Event(), 20)  # warm: imports, connection
    print("ready", flush=True)
    limit = int(count) or None
    print(json.dumps(_probe(kind, url, threading.Event() if limit else stop, limit)), flush=True)
    return 0


def _probed(kind: str, url: str, count: int, during: Callable[[], Any]) -> tuple[list[float], Any]:
    """Probe latencies from a prober process (``count`` probes, or 0: while ``during`` runs)
    and what ``during`` returned."""
    prober = subprocess.Popen([sys.executable, "-m", "benchmarks.hostile", "--probe", kind, url, str(count)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert prober.stdin is not None and prober.stdout is not None
    prober.stdout.readline()
    result = during()
    prober.stdin.close()
    latencies: list[float] = json.loads(prober.stdout.readline())
    prober.wait(30)
    return latencies, result


def _under(
    pid: int, kind: str, url: str, attack: Callable[[], list[int]], console: int = 0
) -> dict[str, Any]:
    """Probe latencies idle, then while ``attack`` runs (the prober in its own process, both
    times); the server's CPU and memory (and the ``console`` process's, if one)."""
    idle, _ = _probed(kind, url, PROBES_IDLE, lambda: None)
    before = {proc: (_kib(proc, "VmRSS"), _cpu_s(proc)) for proc in (pid, console) if proc}
    started = time.perf_counter()
    busy, statuses = _probed(kind, url, 0, attack)
    took = time.perf_counter() - started
    out = {"idle": _percentiles(idle), "under_attack": _percentiles(busy), "attack_s": round(took, 2),
           "answers": {str(s): statuses.count(s) for s in sorted(set(statuses))}}
    for prefix, proc in (("server_", pid), ("console_", console)):
        if proc:
            rss, cpu = before[proc]
            out |= {prefix + "cpu_s": round(_cpu_s(proc) - cpu, 2),
                    prefix + "rss_before_mib": round(rss / 1024, 1),
                    prefix + "peak_over_before_mib": round((_kib(proc, "VmHWM") - rss) / 1024, 1)}
    return out


def bomb(where: Path, rounds: int = 1) -> dict[str, Any]:
    """The barrage (``rounds`` times, one after the other) against an open and a signed
    server; and, for comparison, as many ordinary hellos, the same way, against the open
    one (``hellos``)."""
    home = where / "bomb.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    body, out = bomb_body(), {}
    pair = new_key_pair(where / "dev1.key")
    key = load_private_key(pair.private_path)
    for mode in ("hellos", "open", "signed"):
        if mode == "signed":
            with QueueManager(home) as qm:
                qm.register_device("DEV1", pair.public_key)

        def one(http: httpx.Client, url: str, mode: str = mode) -> int:
            if mode == "hellos":
                return _call("hello", http, url)
            headers = {"content-type": p.CONTENT_TYPE, H_ENCODING: "zstd"}
            if mode == "signed":
                headers.update(sign_headers(key, "DEV1", "POST", p.PATH_PUT, body, system_clock()))
            return http.post(url + p.PATH_PUT, content=body, headers=headers).status_code

        with serve(home, *(["--no-auth"] if mode != "signed" else [])) as (url, pid):
            def attack(url: str = url) -> list[int]:
                def client(_: int) -> list[int]:
                    with httpx.Client(timeout=120) as http:
                        return [one(http, url) for _ in range(BOMBS // BOMB_CLIENTS)]
                with ThreadPoolExecutor(BOMB_CLIENTS, initializer=_attacker) as pool:
                    return [s for _ in range(rounds) for got in pool.map(client, range(BOMB_CLIENTS))
                            for s in got]

            out[mode] = _under(pid, "healthz", url, attack)
    out["body_bytes"] = len(body)
    return out


def flood(where: Path, rounds: int = 1) -> dict[str, Any]:
    """Wrong console logins (``rounds`` floods, each from addresses of its own) while a
    device says hello."""
    home = where / "flood.db"
    with QueueManager(home, name="HOME") as qm:
        qm.define_queue("ORDERS")
    set_password(home, "the-operator-password")
    console_port = free_port()
    with serve(home, "--no-auth", "--console", "--console-port", str(console_port),
               listeners=2) as (url, supervisor):
        (worker,) = [c for c in _children(supervisor) if "--worker-fd" in _cmdline(c)]
        (console,) = [c for c in _children(supervisor) if "--console-fd" in _cmdline(c)]
        console_url = f"http://127.0.0.1:{console_port}"

        def attack() -> list[int]:
            def client(n: int) -> list[int]:
                transport = httpx.HTTPTransport(local_address=f"127.0.{1 + n // 200}.{1 + n % 200}")
                with httpx.Client(timeout=120, transport=transport) as http:
                    return [http.post(console_url + "/console/login",
                                      data={"user": "operator", "password": f"guess-{n}-{i}"}).status_code
                            for i in range(LOGINS // LOGIN_CLIENTS)]
            with ThreadPoolExecutor(LOGIN_CLIENTS, initializer=_attacker) as pool:
                return [s for r in range(rounds) for got in pool.map(client, range(r * LOGIN_CLIENTS,
                                                                                    (r + 1) * LOGIN_CLIENTS))
                        for s in got]

        return _under(worker, "hello", url, attack, console)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostile",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help="bomb, flood (default: both)")
    parser.add_argument("--rounds", type=int, default=1, help="attacks one after the other (default 1)")
    parser.add_argument("--pin", action="store_true",
                        help="the server and the probe on the first CPU, the attacking clients on the others")
    parser.add_argument("--probe", nargs=3, metavar=("KIND", "URL", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        return probe_child(*args.probe)
    if args.pin:
        pin()
    cases = {"bomb": bomb, "flood": flood}
    if unknown := set(args.cases) - set(cases):
        parser.error(f"unknown case(s) {', '.join(sorted(unknown))}: choose from bomb, flood")
    results: dict[str, Any] = {"cpus": os.cpu_count(), "pinned": args.pin}
    with tempfile.TemporaryDirectory(prefix="edgeq-hostile-") as tmp:
        for case in args.cases or ["bomb", "flood"]:
            results[case] = cases[case](Path(tmp), args.rounds)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
