"""A description of the machine a run happened on, for the report."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["describe_machine", "fsync_probe"]


def _meminfo_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _disk(path: Path) -> dict[str, str]:
    """The filesystem holding ``path``: device, type, and whether the disk rotates."""
    best = ("", "", "")
    try:
        target = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            if target.startswith(mount) and len(mount) >= len(best[1]):
                best = (device, mount, fstype)
    except OSError:
        pass
    out = {"device": best[0], "mount": best[1], "fstype": best[2]}
    name = Path(best[0]).name
    rotational = Path(f"/sys/block/{name}/queue/rotational")
    if rotational.exists():
        out["rotational"] = rotational.read_text().strip()
    stat = os.statvfs(path)
    out["size_gb"] = f"{stat.f_blocks * stat.f_frsize / 1e9:.0f}"
    return out


def describe_machine(workdir: Path) -> dict[str, Any]:
    """Cores, RAM, CPU, OS, Python, SQLite and the disk the queues were written to."""
    ram = _meminfo_gb()
    disk = _disk(workdir)
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "ram_gb": round(ram, 1) if ram else None,
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "disk": disk,
    }
    info["summary"] = (
        f"{info['cores']} cores ({info['cpu']}), {info['ram_gb']} GB RAM, {info['os']}, "
        f"Python {info['python']}, SQLite {info['sqlite']}, disk {disk.get('device')} "
        f"({disk.get('fstype')}, {disk.get('size_gb')} GB, rotational={disk.get('rotational', '?')})"
    )
    return info


def fsync_probe(directory: Path, count: int = 200) -> dict[str, float]:
    """Latency of ``fsync`` after a 4 KiB append in ``directory``: the floor of a durable commit.

    Recorded before and after a run: on shared or burst-credited disks it moves,
    and every durable-write figure in the report moves with it.
    """
    fd, path = tempfile.mkstemp(dir=directory, prefix="fsync-probe-")
    latencies: list[float] = []
    try:
        for _ in range(count):
            os.write(fd, b"\0" * 4096)
            start = time.perf_counter()
            os.fsync(fd)
            latencies.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.remove(path)
    latencies.sort()
    return {
        "p50_us": statistics.median(latencies) * 1e6,
        "p90_us": latencies[int(count * 0.9)] * 1e6,
        "p99_us": latencies[min(count - 1, int(count * 0.99))] * 1e6,
    }
