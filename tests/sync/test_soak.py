"""A bounded soak of the sync exchange under random faults, with real processes.

Messages are put on the device in waves (some with short absolute expiries); before
each ``edgeq sync --once`` run the proxy is armed with a random fault (SIGKILL of the
device or of the server at a random point of the exchange, lost requests or answers,
duplicated or replayed requests); an application on the server consumes some messages
meanwhile. After the last fault a clean run settles the device and ``Rig.verify``
checks exactly-once delivery, an empty device and no expired delivery. The seed is in
every assertion message; ``EDGEQ_SOAK_SEED`` replays one.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.sync.faultkit import Fault, Rig

# (action, weight): device kills and lost answers are the common faults.
ACTIONS = (
    ("kill-device-before", 3), ("kill-device-after-forward", 3), ("kill-device-after-answer", 3),
    ("drop-request", 1), ("drop-response", 2), ("duplicate", 2), ("replay", 1),
    ("kill-server-before", 2), ("kill-server-during", 2),
)
PATHS = (("/v1/put", 4), ("/v1/confirm", 4), ("/v1/hello", 1), ("/v1/expiries", 1))


def _pick(rng: random.Random, choices: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def soak(tmp_path: Path, *, messages: int, faults: int, batch_size: int, seed: int, budget_s: float,
         device: str = "mixed", signed: bool = False) -> dict[str, object]:
    """``device``: ``once`` (a new ``edgeq sync --once`` process per round), ``worker``
    (one long-lived agent, restarted only when a fault kills it) or ``mixed`` (each
    round picks one; the worker is stopped before a ``--once`` round). ``signed``:
    the device signs its requests, so a duplicated one is refused as a replay."""
    rng = random.Random(seed)
    context = f"soak seed={seed} device={device} signed={signed} (replay with EDGEQ_SOAK_SEED={seed})"
    started = time.monotonic()
    waves = [messages // faults + (i < messages % faults) for i in range(faults)]
    fired: Counter[str] = Counter()
    codes: Counter[int] = Counter()
    with Rig(tmp_path, batch_size=batch_size, context=context, signed=signed) as rig:
        round_ = 0
        while sum(fired.values()) < faults:
            round_ += 1
            assert round_ <= faults * 4 + 10, (
                f"{context}: only {sum(fired.values())} faults fired in {round_} rounds")
            assert time.monotonic() - started < budget_s, (
                f"{context}: over the {budget_s}s budget, faults {fired}")
            if waves:
                rig.put(waves.pop(0), tag=f"w{round_}", rng=rng, expiring=0.1, expiry_ms=(-500, 4000))
            if rng.random() < 0.25:
                rig.consume(rng.randint(1, 2 * batch_size))
            action, path = _pick(rng, ACTIONS), _pick(rng, PATHS)
            nth = rng.randint(1, 2) if path in ("/v1/put", "/v1/confirm") else 1
            fault = Fault(action, path, nth, answer=rng.choice(("first", "second")))
            if device == "worker" or (device == "mixed" and rng.random() < 0.5):
                outcome = rig.push(fault)
            else:
                rig.stop_worker()
                outcome = rig.run(fault)
            codes[outcome.code] += 1
            if not fault.fired:
                assert outcome.code == 0, f"{context}: round {round_} failed without a fault: {outcome}"
                continue
            fired[f"{action} {path}"] += 1
            # A signed request sent twice: the second is refused as a replay (401), and
            # fails the run if that is the answer the device gets.
            if action in ("duplicate", "replay") and not (signed and fault.answer == "second"):
                assert outcome.code == 0, f"{context}: round {round_}: {outcome}\n{outcome.stderr[-2000:]}"
        while waves:  # every message is put, even if the faults were used up early
            rig.put(waves.pop(0), tag="rest", rng=rng, expiring=0.1, expiry_ms=(-500, 4000))
        counts = rig.verify()
        assert counts["sent"] == messages, f"{context}: {counts}"
        counts.update(rounds=round_, server_starts=rig.server.starts, device_kills=rig.proxy.device_kills if
                      rig.proxy else 0, seconds=round(time.monotonic() - started, 1))
        hellos = sorted(int(e["clock_offset_ms"]) for e in rig.server.events("hello"))
        print(f"{context}: {counts}; exits {dict(codes)}; faults {dict(fired)}; "
              f"hello latencies (ms) median {hellos[len(hellos) // 2]}, top {hellos[-5:]}")
        return {**counts, "fired": fired}


def _seed(default: int) -> int:
    return int(os.environ.get("EDGEQ_SOAK_SEED", default))


@pytest.mark.parametrize(("device", "signed"), [("once", False), ("worker", False), ("mixed", True)])
def test_soak_small(tmp_path: Path, device: str, signed: bool) -> None:
    """300 messages, 8 random faults: quick enough for every run of the suite."""
    soak(tmp_path, messages=300, faults=8, batch_size=25, seed=_seed(20251121), budget_s=120, device=device,
         signed=signed)


@pytest.mark.slow
def test_soak_10k_messages_50_faults(tmp_path: Path) -> None:
    """10,000 messages, 50 random faults (device and server kills at random points,
    lost and duplicated requests). About 3 minutes on two quiet cores; the budget only
    guards against a livelock (run beside other tests, as under xdist, it takes longer)."""
    result = soak(tmp_path, messages=10_000, faults=50, batch_size=200, seed=_seed(1763683200), budget_s=600)
    assert result["server_starts"] >= 2  # the server was killed and restarted along the way
