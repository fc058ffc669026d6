"""The MQTT QoS 2 baseline of the sync case: paho-mqtt clients and a private mosquitto broker.

Runner side: :func:`ensure_mosquitto` finds the broker binary and, when it is
missing, installs it from Debian packages (``apt-get install -y mosquitto``);
:class:`Broker` starts a mosquitto of its own on a free loopback port with a
temporary configuration, persistence on and autosaved as often as mosquitto
allows, and stops it again.

Child side: :func:`child_subscribe` (a subscriber with a persistent session,
QoS 2, counting what it receives) and :func:`child_publish` (a QoS 2
publisher sending as fast as the flow control allows, timing from the first
publish to the last PUBCOMP). paho-mqtt is imported only in those children.

How durable mosquitto is, honestly: its persistence is a *snapshot* of the
whole in-memory database (``mosquitto.db``, written to a temporary file,
fsynced, renamed). ``autosave_on_changes true`` with ``autosave_interval 1``
takes one after every main-loop pass that changed something, but the broker
sends PUBREC / PUBCOMP without waiting for it: a message acknowledged to the
publisher can still be lost by a power cut before the next snapshot. edgeq's
server at ``--durability full`` commits (fsync) every put batch and every
confirm before it answers. The comparison therefore flatters MQTT.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks.peers.base import make_payload, payload_index

__all__ = [
    "AUTOSAVE",
    "Broker",
    "MosquittoUnavailable",
    "child_publish",
    "child_subscribe",
    "cpu_seconds",
    "ensure_mosquitto",
    "find_mosquitto",
    "free_port",
    "paho_installed",
    "wait_for_port",
]

#: Where Debian's package puts the broker (``/usr/sbin`` is often not on a user's PATH).
_CANDIDATES = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto", "/usr/bin/mosquitto")
TOPIC = "edgeq-bench/orders"
#: Messages a publisher keeps queued in paho beyond those completed (well under the 65,535 packet ids).
MAX_OUTSTANDING = 20_000


class MosquittoUnavailable(RuntimeError):
    """mosquitto is not installed and could not be installed (the message says why and what to do)."""


def paho_installed() -> bool:
    """Whether paho-mqtt can be imported in this environment (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("paho.mqtt.client") is not None
    except ModuleNotFoundError:
        return False


def find_mosquitto() -> str | None:
    """The mosquitto broker binary, or None."""
    found = shutil.which("mosquitto")
    if found:
        return found
    return next((c for c in _CANDIDATES if os.access(c, os.X_OK)), None)


def _apt(args: list[str], log: Any) -> subprocess.CompletedProcess[str]:
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise MosquittoUnavailable("mosquitto is missing and installing it needs root (no sudo found): "
                                       "run `sudo apt-get install -y mosquitto` once")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log(f"  running: {' '.join(prefix + args)}")
    return subprocess.run(prefix + args, capture_output=True, text=True, env=env, timeout=600, check=False)


def ensure_mosquitto(log: Any, *, install: bool = True) -> str:
    """The mosquitto binary, installing the Debian package first if it is missing.

    Tries ``apt-get install -y mosquitto``, and when that fails (empty package
    lists on a fresh machine) ``apt-get update`` and the install again. Raises
    :class:`MosquittoUnavailable` with the reason and the manual command.
    """
    found = find_mosquitto()
    if found or not install:
        if found:
            return found
        raise MosquittoUnavailable("mosquitto is not installed (installation not attempted: --no-install)")
    if shutil.which("apt-get") is None:
        raise MosquittoUnavailable("mosquitto is missing and this machine has no apt-get: "
                                   "install the mosquitto broker with the system's package manager")
    log("mosquitto is missing: installing it from Debian packages (the MQTT baseline of the sync case)")
    install_cmd = ["apt-get", "install", "-y", "--no-install-recommends", "mosquitto"]
    done = _apt(install_cmd, log)
    if done.returncode != 0:
        _apt(["apt-get", "update"], log)
        done = _apt(install_cmd, log)
    found = find_mosquitto()
    if done.returncode != 0 or found is None:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise MosquittoUnavailable(f"`apt-get install -y mosquitto` failed (exit {done.returncode}): {tail}")
    return found


def mosquitto_version(binary: str) -> str:
    """``2.0.11``-style version of the broker binary (empty if it cannot say)."""
    try:
        out = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for word in (out.stdout + out.stderr).split():
        if word[:1].isdigit() and word.count(".") >= 1:
            return word.rstrip(".,")
    return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(
    proc: subprocess.Popen[Any], port: int, deadline_s: float, what: str, log_file: Path
) -> None:
    """Return once ``127.0.0.1:port`` accepts connections; raise if ``proc`` exits or the deadline passes.

    Between attempts it waits on the process itself (``proc.wait`` with a short
    timeout), so a server that dies is noticed at once.
    """
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen on port {port} within {deadline_s:.0f} s: "
                               f"{_tail(log_file)}")
        try:
            code = proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        raise RuntimeError(f"{what} exited with {code} before listening: {_tail(log_file)}")


def _tail(path: Path, lines: int = 6) -> str:
    try:
        return " | ".join(path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a running process has used so far (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15.0) -> int | None:
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


#: How often the broker snapshots its database: after every change (as durable as
#: mosquitto gets), or mosquitto's default (every 1800 s, and at exit).
AUTOSAVE = {
    "changes": ["autosave_on_changes true", "autosave_interval 1"],
    "periodic": ["autosave_on_changes false", "autosave_interval 1800"],
}


class Broker:
    """A private mosquitto on a free loopback port, persistence on, in ``directory``.

    ``autosave`` is a key of :data:`AUTOSAVE`. Use as a context manager;
    ``port`` is set once it listens.
    """

    def __init__(self, binary: str, directory: Path, *, inflight: int, autosave: str = "changes") -> None:
        self.binary = binary
        self.directory = directory
        self.inflight = inflight
        self.autosave = self.autosave_lines(autosave)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_file = directory / "mosquitto.log"
        self.config_file = directory / "mosquitto.conf"
        self.db_file = directory / "mosquitto.db"

    @staticmethod
    def autosave_lines(autosave: str) -> list[str]:
        """The configuration lines of an :data:`AUTOSAVE` key."""
        return AUTOSAVE[autosave]

    def config(self) -> str:
        """The configuration: loopback listener, persistence saved after every change, no queue limits."""
        import pwd

        return "\n".join([
            f"listener {self.port} 127.0.0.1",
            # Started as root, mosquitto switches to the user "mosquitto", which could not
            # write its snapshot or log here: persistence would silently do nothing.
            f"user {pwd.getpwuid(os.geteuid()).pw_name}",
            "allow_anonymous true",
            "persistence true",
            f"persistence_location {self.directory}/",
            "persistence_file mosquitto.db",
            # "changes": save the in-memory database after every change (as durable as mosquitto
            # gets); it is still a snapshot taken after the acknowledgement, not an fsync before it.
            *self.autosave,
            # No dropping: queue every message for the persistent session, however many.
            "max_queued_messages 0",
            "max_queued_bytes 0",
            f"max_inflight_messages {self.inflight}",
            f"log_dest file {self.log_file}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "",
        ])

    def start(self, deadline_s: float = 20.0) -> Broker:
        """Write the configuration, start the broker, wait until it accepts connections."""
        self.port = free_port()
        self.config_file.write_text(self.config(), encoding="utf-8")
        self.proc = subprocess.Popen([self.binary, "-c", str(self.config_file)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.proc, self.port, deadline_s, "mosquitto", self.log_file)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the broker (it writes a last snapshot on SIGTERM)."""
        if self.proc is not None:
            stop_process(self.proc)

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# -- child side ---------------------------------------------------------------------------


def _client(client_id: str, *, clean_session: bool, inflight: int) -> Any:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean_session,
                         protocol=mqtt.MQTTv311)
    client.max_inflight_messages_set(inflight)
    client.max_queued_messages_set(0)  # 0: no limit on messages waiting for an inflight slot
    return client


def _connect(client: Any, port: int, deadline_s: float) -> None:
    """Connect, run the network loop in its thread, and wait for CONNACK."""
    connected = threading.Event()
    refused: list[str] = []

    def on_connect(c: Any, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if reason.is_failure:
            refused.append(str(reason))
        connected.set()

    client.on_connect = on_connect
    client.connect("127.0.0.1", port, keepalive=60)
    client.loop_start()
    if not connected.wait(deadline_s) or refused:
        raise RuntimeError(f"MQTT connect to 127.0.0.1:{port} failed: {refused or 'no CONNACK'}")


def child_subscribe(spec: dict[str, Any]) -> dict[str, Any]:
    """Subscriber with a persistent session (clean_session False), QoS 2.

    Subscribes, prints ``READY``, counts every message by the index in its
    payload; on ``STOP`` from stdin it waits (up to the budget) until every
    expected message arrived, disconnects, and reports the counts and the
    monotonic time of its first and last delivery.
    """
    import sys

    expected = int(spec["messages"])
    budget = float(spec["budget_s"])
    client = _client("edgeq-bench-sub", clean_session=False, inflight=int(spec["inflight"]))
    counts: Counter[int] = Counter()
    times: list[float] = []
    lock = threading.Condition()
    subscribed = threading.Event()

    def on_subscribe(c: Any, userdata: Any, mid: int, reasons: Any, properties: Any) -> None:
        subscribed.set()

    def on_message(c: Any, userdata: Any, msg: Any) -> None:
        now = time.monotonic()
        with lock:
            counts[payload_index(msg.payload)] += 1
            if not times:
                times.append(now)  # first delivery
            times[1:] = [now]  # last delivery
            if len(counts) >= expected:
                lock.notify_all()

    client.on_subscribe = on_subscribe
    client.on_message = on_message
    _connect(client, int(spec["port"]), 20.0)
    client.subscribe(TOPIC, qos=2)
    if not subscribed.wait(20.0):
        raise RuntimeError("no SUBACK from the broker")
    print("READY", flush=True)
    sys.stdin.readline()  # STOP: the publisher has its last PUBCOMP
    with lock:
        lock.wait_for(lambda: len(counts) >= expected, timeout=budget)
        received = sum(counts.values())
        distinct = len(counts)
        first, last = (times[0], times[-1]) if times else (0.0, 0.0)
    client.disconnect()
    client.loop_stop()
    return {"metrics": {"received": float(received), "distinct": float(distinct),
                        "duplicates": float(received - distinct), "losses": float(expected - distinct),
                        "first_delivery": first, "last_delivery": last}}


def child_publish(spec: dict[str, Any]) -> dict[str, Any]:
    """QoS 2 publisher (``qos`` 1 and ``topic`` for the bridge_in case): ``messages`` publishes as fast
    as the inflight window allows.

    Payloads are built before the clock starts. Times from the first
    ``publish`` call to the last PUBCOMP (paho's ``on_publish`` for QoS 2).
    At most :data:`MAX_OUTSTANDING` messages are handed to paho and not yet
    completed at any time: paho numbers a message when ``publish`` queues it,
    and packet ids are 16-bit, so queueing 65,536 or more at once reuses ids
    of messages still queued, and the session stalls.
    """
    import paho.mqtt.client as mqtt

    n = int(spec["messages"])
    if spec.get("telemetry"):  # the wire case's JSON readings (benchmarks.telemetry)
        from benchmarks.telemetry import telemetry

        bodies = telemetry(n)
    else:
        bodies = [make_payload(i, int(spec["payload_bytes"])) for i in range(n)]
    client = _client("edgeq-bench-pub", clean_session=False, inflight=int(spec["inflight"]))
    qos, topic = int(spec.get("qos", 2)), str(spec.get("topic", TOPIC))  # the bridge_in case: QoS 1
    done = threading.Condition()
    completed: list[float] = []
    failures: Counter[str] = Counter()

    def on_publish(c: Any, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        with done:
            completed.append(time.monotonic())
            if reason.is_failure:
                failures[str(reason)] += 1
            done.notify_all()  # the end, or room in the publishing window

    client.on_publish = on_publish
    _connect(client, int(spec["port"]), 20.0)
    cpu = time.process_time()
    start = time.monotonic()
    errors = 0
    window = max(int(spec["inflight"]), MAX_OUTSTANDING)

    def completed_more_than(count: int) -> bool:
        return len(completed) > count

    for sent, body in enumerate(bodies):
        if sent - len(completed) >= window:
            with done:
                if not done.wait_for(functools.partial(completed_more_than, sent - window),
                                     timeout=float(spec["budget_s"])):
                    break
        info = client.publish(topic, body, qos=qos)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            errors += 1
    queued = time.monotonic()
    with done:
        finished = done.wait_for(lambda: len(completed) >= n, timeout=float(spec["budget_s"]))
        last = completed[-1] if completed else start
        acked = len(completed)
    cpu = time.process_time() - cpu
    client.disconnect()
    client.loop_stop()
    if not finished or errors or failures:
        raise RuntimeError(f"QoS {qos} publish incomplete: {acked} of {n} acknowledged, {errors} publish "
                           f"errors, failures {dict(failures)}")
    seconds = last - start
    return {"metrics": {"messages": float(n), "seconds": seconds, "msgs_per_s": n / seconds,
                        "publish_calls_s": queued - start, "start": start, "last_pubcomp": last,
                        "client_cpu_s": cpu},
            "info": {"paho_version": _paho_version()}}


def _paho_version() -> str:
    from importlib.metadata import version

    return version("paho-mqtt")
