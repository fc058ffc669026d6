"""Realistic telemetry payloads for the wire and fleet cases: JSON sensor readings of
about 200 bytes, varied the way real ones are (a timestamp that advances with jitter, a
sensor id from a fleet, floats that drift, an occasional state change), from a fixed
seed so every run and every library sends the same bytes.

>>> a, b = telemetry(2)
>>> len(a) in range(170, 240), reading_seq(b)
(True, 1)
"""

from __future__ import annotations

import json
import random

__all__ = ["SEED", "mean_size", "reading_seq", "telemetry"]

SEED = 20_240_613
_START_MS = 1_763_683_200_000
_STATES = ("ok", "ok", "ok", "ok", "warn", "maintenance")


def telemetry(count: int, *, seed: int = SEED, start: int = 0) -> list[bytes]:
    """``count`` readings (``seq`` from ``start``), each a compact JSON object."""
    rng = random.Random(seed)
    temp, humidity, pressure, battery = 21.5, 48.0, 1013.2, 3.95
    out = []
    ts = _START_MS
    for seq in range(start, start + count):
        ts += 1000 + rng.randrange(-40, 41)
        temp += rng.gauss(0, 0.15)
        humidity = min(100.0, max(0.0, humidity + rng.gauss(0, 0.4)))
        pressure += rng.gauss(0, 0.05)
        battery = max(3.2, battery - rng.random() * 0.0004)
        reading = {
            "ts": ts,
            "sensor": f"th-{rng.randrange(1, 4097):05d}",
            "site": f"plant-{rng.randrange(1, 13):02d}",
            "seq": seq,
            "temp_c": round(temp, 2),
            "rh_pct": round(humidity, 1),
            "p_hpa": round(pressure, 2),
            "vib_rms": round(abs(rng.gauss(0.8, 0.3)), 4),
            "batt_v": round(battery, 3),
            "co2_ppm": rng.randrange(400, 1400),
            "rssi_dbm": rng.randrange(-95, -40),
            "state": rng.choice(_STATES),
            "fw": "4.2.1",
        }
        out.append(json.dumps(reading, separators=(",", ":")).encode())
    return out


def reading_seq(payload: bytes) -> int:
    """The ``seq`` of a reading (to count losses and duplicates at the receiving end)."""
    seq: int = json.loads(payload)["seq"]
    return seq


def mean_size(payloads: list[bytes]) -> float:
    """The mean payload size in bytes."""
    return sum(map(len, payloads)) / len(payloads) if payloads else 0.0
