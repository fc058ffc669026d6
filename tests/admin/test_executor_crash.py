"""Exactly once across crashes: a real device process running ``process_admin``, SIGKILLed
between the steps of a request's run (and at random points, many times); the requests are
then redelivered and no action runs twice, and no request gets two reply messages."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.admin.executor import INTERRUPTED
from edgeq.admin.wire import ADMIN_QUEUE, AdminReply
from tests.adminkit import OPERATOR, admin_queues, enqueue, replies, signed

WORKER = str(Path(__file__).parents[1] / "adminworker.py")


def device(path: Path) -> QueueManager:
    qm = QueueManager(path, name="DEV1")
    return qm


def set_up(path: Path, count: int) -> list[str]:
    """DEV1 with its admin queues and ``count`` define-queue requests waiting (Q0, Q1, ...)."""
    with device(path) as qm:
        admin_queues(qm)
        qm.trust_admin_key("ops", OPERATOR.public_key())
        ids = []
        for i in range(count):
            request = signed(qm, "define-queue", f"Q{i}")
            enqueue(qm, request)
            ids.append(request.request_id)
    return ids


def worker(path: Path, point: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, WORKER, str(path), point], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})


@pytest.mark.parametrize("point", ["before-action", "after-action", "after-send"])
def test_a_device_killed_mid_request_never_runs_it_twice(tmp_path: Path, point: str) -> None:
    path = tmp_path / "dev1.db"
    (rid,) = set_up(path, 1)
    killed = worker(path, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with device(path) as qm:
        ran = "Q0" in qm.queue_names()
        assert ran == (point != "before-action")
        assert qm.depth(ADMIN_QUEUE) == 1  # the request is still there: it is delivered again
    again = worker(path, "none")
    assert again.returncode == 0, again.stderr
    with device(path) as qm:
        assert qm.depth(ADMIN_QUEUE) == 0
        (reply,) = replies(qm)  # one reply message, whatever happened
        assert reply.request_id == rid
        if point == "after-send":
            assert reply.rc == "success"  # recorded and sent before the kill
        else:
            assert (reply.rc, reply.message) == ("failed", INTERRUPTED)  # never "already defined"
        assert ("Q0" in qm.queue_names()) == ran  # the redelivery did not run it


def test_killed_at_random_points_many_times_no_request_runs_twice_or_replies_twice(tmp_path: Path) -> None:
    path = tmp_path / "dev1.db"
    ids = set_up(path, 120)  # enough that a worker is killed at least 10 times before it empties them
    rng = random.Random(12)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    kills = 0
    for _ in range(100):
        with subprocess.Popen([sys.executable, WORKER, str(path), "none"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) as proc:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(rng.randint(1, 2))]
            finished = any(line.startswith("empty") for line in lines) or "" in lines
            if not finished:
                # The kill point: a random moment of the next request's run (a cycle takes a few
                # ms of fsyncs), not a wait for anything.
                time.sleep(rng.uniform(0, 0.03))
                os.kill(proc.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=60)
        if finished:
            assert proc.returncode == 0, err
            break
        kills += 1
    else:
        pytest.fail("the worker never emptied the admin queue")
    assert kills >= 10
    with device(path) as qm:
        assert qm.depth(ADMIN_QUEUE) == 0
        got: dict[str, AdminReply] = {}
        for reply in replies(qm):
            assert reply.request_id not in got, "two reply messages for one request"
            got[reply.request_id] = reply
        assert sorted(got) == sorted(ids)
        for i, rid in enumerate(ids):
            reply = got[rid]
            # never "already defined"
            assert reply.rc == "success" or reply.message == INTERRUPTED, reply.message
            if reply.rc == "success":
                assert f"Q{i}" in qm.queue_names()
        remembered = {r.request_id: r for r in qm.admin_history(limit=1000)}
        assert all(remembered[rid] == got[rid] for rid in ids)  # what was sent is what is remembered
