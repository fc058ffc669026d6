"""The analytics pipeline's throughput: synthetic home-server journals of 1M and 10M rows.

    python -m benchmarks.pipeline_bench                      # 1M and 10M rows on local[2], each grown by 1%
    python -m benchmarks.pipeline_bench --rows 5k,1M --master 'local[*]'
    python -m benchmarks.pipeline_bench --generate-only --rows 100M --dir /data/journal
    python -m benchmarks.pipeline_bench --rows 1M --tasks           # also the executors' task time

The generator writes Parquet directly in ``edgeq export``'s layout
(``date=YYYY-MM-DD/part-FIRST-LAST.parquet``, the journal's columns), so the job
reads it exactly as it reads a real export. The journal it makes looks like a
busy home server's: devices with clock offsets push messages to a few queues
(an ``accepted`` entry each, latencies of tens of ms to minutes), most are
delivered, some expire on the server, some on the device before they were
sent, and a few on both sides. Needs the ``pipeline`` extra (pyarrow, pyspark)
and Java 17+. Rows/s is journal rows divided by the job's wall time (reading
the journal, keeping the state for the next run and writing every report;
Spark's start-up is reported apart; so is the machine's load average at each
run's start, since other work on the machine skews the figures). Each size is
generated with 1% more rows as a last batch of part files (``--grow``): the
full run reads the journal without them, then an incremental run reads only
them; its time is reported as a fraction of the full run's. Each run is a
process (a JVM) of its own, started with the options ``edgeq pipeline run``
would choose for that journal, as each ``edgeq pipeline run`` is: the
incremental run starts as cold as the full one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edgeq.store.journal import JOURNAL_COLUMNS
from edgeq.sync.pipeline.export.exporter import MANIFEST, arrow_schema, part_name

__all__ = ["FLOOR_KEYS", "generate", "last_batch", "main", "move_parts", "spark_floor", "task_seconds"]

START_MS = 1_763_683_200_000  # 2025-11-21T00:00:00Z
QUEUES = ("ORDERS", "TELEMETRY", "ALERTS", "AUDIT")
CHECK_POINTS = ("get", "sweep", "activate", "depth", "browse")


def _size(text: str) -> int:
    units = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}
    text = text.strip().lower()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


class _Chunk:
    """One part file's worth of rows, as columns, and which rows fall on which day."""

    def __init__(self, next_id: int) -> None:
        self.next_id = next_id
        self.cols: dict[str, list[Any]] = {c: [] for c in JOURNAL_COLUMNS}
        self.by_day: dict[int, list[int]] = {}

    def add(self, kind: str, side: str, at: int, queue: str, uid: str, origin: str, cp: str | None,
            size: int | None, created: int | None, arrived: int | None, confirmed: int | None,
            offset: int | None, device: str | None) -> None:
        index = len(self.cols["id"])
        values = (self.next_id, kind, side, at, queue, uid, origin, cp, size, created, arrived, confirmed,
                  offset, device)
        for name, value in zip(JOURNAL_COLUMNS, values, strict=True):
            self.cols[name].append(value)
        self.by_day.setdefault(at // 86_400_000, []).append(index)
        self.next_id += 1


def generate(out: Path, rows: int, *, devices: int = 200, seed: int = 1, days: int = 7,
             file_rows: int = 1_000_000, last_rows: int = 0) -> int:
    """Write about ``rows`` journal rows under ``out``; return how many were written. With
    ``last_rows``, the last ``last_rows`` of them are a batch of their own (part files of their
    own, the highest journal ids): what an export adds when the journal grows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    schema = arrow_schema()
    offsets = [rng.randint(-5_000, 5_000) for _ in range(devices)]
    names = [f"DEV{d:05d}" for d in range(devices)]
    span_ms = days * 86_400_000
    next_id, written = 1, 0
    step = span_ms / max(1, rows / 1.75)  # ~1.75 journal rows per message
    now = float(START_MS)
    stamps = [0] * devices
    while written < rows:
        chunk = _Chunk(next_id)
        cols, add = chunk.cols, chunk.add
        body = rows - last_rows
        limit = min(file_rows, body - written) if written < body else rows - written
        while len(cols["id"]) < limit:
            now += rng.expovariate(1 / step)
            d = rng.randrange(devices)
            queue = QUEUES[min(3, int(rng.expovariate(1.2)))]
            created_server = int(now)
            created = created_server + offsets[d]
            stamps[d] = max(stamps[d] + 1, created * 1000)
            uid = f"{names[d]}.{stamps[d]}"
            size = rng.randint(20, 2_000)
            roll = rng.random()
            if roll < 0.03:  # expired on the device before it was sent
                add("expired", "device", created_server + 60_000, queue, uid, names[d],
                    rng.choice(CHECK_POINTS), size, created, None, None, offsets[d], names[d])
                continue
            arrived = created_server + int(rng.lognormvariate(5, 1.5))
            if roll < 0.035:  # stage one reached the server, then both sides expired it
                add("expired", "server", arrived + 30_000, queue, uid, names[d], "sweep", size, created,
                    arrived, None, None, None)
                add("expired", "device", arrived + 31_000, queue, uid, names[d], "sweep", size, created, None,
                    None, offsets[d], names[d])
                continue
            confirmed = arrived + rng.randint(1, 400)
            add("accepted", "server", confirmed, queue, uid, names[d], None, size, created, arrived,
                confirmed, offsets[d], names[d])
            if roll < 0.80:
                add("delivered", "server", confirmed + int(rng.expovariate(1 / 20_000)), queue, uid, names[d],
                    None, size, created, arrived, None, None, None)
            elif roll < 0.86:
                add("expired", "server", confirmed + 300_000, queue, uid, names[d], rng.choice(CHECK_POINTS),
                    size, created, arrived, None, None, None)
        next_id = chunk.next_id
        first_id = cols["id"][0]
        last_id = cols["id"][-1]
        for day, indexes in chunk.by_day.items():
            folder = out / f"date={time.strftime('%Y-%m-%d', time.gmtime(day * 86_400))}"
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.Table.from_pydict({c: [cols[c][i] for i in indexes] for c in JOURNAL_COLUMNS},
                                         schema=schema)
            pq.write_table(table, folder / part_name(first_id, last_id), compression="zstd")
        written += len(cols["id"])
    (out / MANIFEST).write_text(json.dumps({"format": 1, "server": "BENCH", "watermark": next_id - 1,
                                            "rows": written, "synthetic": True}) + "\n")
    return written


def last_batch(journal: Path) -> list[Path]:
    """The part files of the journal's last batch (the highest first id)."""
    parts = sorted(journal.glob("date=*/part-*.parquet"))
    last = max(int(p.stem.split("-")[1]) for p in parts)
    return [p for p in parts if int(p.stem.split("-")[1]) == last]


def move_parts(parts: list[Path], source: Path, target: Path) -> None:
    """Move ``parts`` (files under ``source``) to the same places under ``target``."""
    for part in parts:
        moved = target / part.relative_to(source)
        moved.parent.mkdir(parents=True, exist_ok=True)
        part.rename(moved)


#: The journal's columns :func:`spark_floor` groups by, in turn.
FLOOR_KEYS = ("kind", "side", "queue", "origin", "device", "check_point")


def spark_floor(spark: Any, journal: Path, out: Path, *, queries: int = 12) -> dict[str, Any]:
    """What Spark itself costs in a JVM that has run nothing yet, whatever the job: ``queries``
    small, distinct queries over ``journal`` run one after another, each grouping the journal by
    one of :data:`FLOOR_KEYS` (in turn; two kinds of aggregate) and writing the result as one
    Parquet file under ``out``. Returns each query's seconds (the first holds the JVM's warm-up)
    and the groups each wrote. A run of the job is seventeen queries (the survey, three state
    bundles, twelve reports, the totals), each larger than these, which bounds how short a
    run can be on this machine."""
    from pyspark.sql import functions as F

    from edgeq.sync.pipeline.job.runner import read_journal

    rows = read_journal(spark, str(journal))
    seconds, groups = [], []
    for i in range(queries):
        key = FLOOR_KEYS[i % len(FLOOR_KEYS)]
        aggs = ([F.count("*").alias("n"), F.max("at_ms").alias("last_ms")] if i % 2 == 0 else
                [F.sum("at_ms").alias("total_ms"), F.count_distinct("uid").alias("uids")])
        target = out / f"q{i:02d}"
        t0 = time.perf_counter()
        rows.groupBy(key).agg(*aggs).coalesce(1).write.mode("overwrite").parquet(str(target))
        seconds.append(time.perf_counter() - t0)
        groups.append(sum(_parquet_rows(f) for f in target.glob("*.parquet")))
    return {"seconds": [round(x, 3) for x in seconds], "groups": groups}


def task_seconds(log_dir: Path) -> dict[str, float]:
    """The executors' work in the one application whose Spark event log is under ``log_dir``
    (``spark.eventLog.dir``, uncompressed): run time and CPU time of every task of every
    completed stage, summed (seconds). Divided by the cores, the least wall time that work
    could take however well its jobs were overlapped."""
    # Spark 4 rolls the log: a directory per application, its events in files events_N_APP.
    (app,) = list(log_dir.iterdir())
    logs = sorted(app.glob("events_*"), key=lambda p: int(p.name.split("_")[1])) if app.is_dir() else [app]
    run_ms = cpu_ns = 0
    for log in logs:
        with log.open(encoding="utf-8") as lines:
            for line in lines:
                if '"SparkListenerStageCompleted"' not in line:
                    continue
                stage = json.loads(line)["Stage Info"]
                totals = {a.get("Name"): a.get("Value") for a in stage.get("Accumulables", [])}
                run_ms += int(totals.get("internal.metrics.executorRunTime") or 0)
                cpu_ns += int(totals.get("internal.metrics.executorCpuTime") or 0)
    return {"task_s": round(run_ms / 1000, 1), "task_cpu_s": round(cpu_ns / 1e9, 1)}


def _parquet_rows(path: Path) -> int:
    """The rows of one Parquet file."""
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def _paths(root: Path, size: int, grow: float) -> tuple[int, Path, Path, Path]:
    extra = int(size * grow)
    return extra, root / f"journal-{size}-{extra}", root / f"held-{size}-{extra}", root / f"reports-{size}"


def run_size(
    spark: Any, root: Path, size: int, *, grow: float, say: Any, phase: str = "full"
) -> dict[str, Any]:
    """Generate (once) a journal of ``size`` rows plus ``grow`` of it as a last batch, then
    time one ``phase``: ``full``, a full run over the first ``size`` rows (the last batch held
    back); ``incremental``, a run over the whole journal into the same output, which reads
    only the last batch."""
    from edgeq.sync.pipeline.job.runner import run_pipeline

    extra, journal, held, out = _paths(root, size, grow)
    if phase == "incremental":
        load = os.getloadavg()[0]
        inc = run_pipeline(spark, journal, out, progress=say)
        if inc.audit_scope["mode"] != "incremental":
            raise SystemExit(f"the run after the full one was not incremental: {inc.audit_scope['reason']}")
        return {"grown_rows": int(inc.audit_scope["new_rows"]),
                "incremental_seconds": round(inc.total_seconds, 1),
                "incremental_steps": {k: round(v, 1) for k, v in inc.seconds.items()},
                "incremental_load": round(load, 2)}
    if not journal.exists():
        t0 = time.perf_counter()
        n = generate(journal, size + extra, last_rows=extra)
        say(f"generated {n:,} rows in {time.perf_counter() - t0:.1f} s -> {journal}")
    shutil.rmtree(out, ignore_errors=True)
    later = last_batch(journal) if extra else []
    move_parts(later, journal, held)  # the export before the journal grew
    load = os.getloadavg()[0]  # other work on the machine skews the figures: report it beside them
    try:
        full = run_pipeline(spark, journal, out, full=True, progress=say)
    finally:
        move_parts([held / p.relative_to(journal) for p in later], held, journal)
    return {
        "rows": full.journal_rows, "seconds": round(full.total_seconds, 1),
        "rows_per_s": round(full.journal_rows / full.total_seconds),
        "steps": {k: round(v, 1) for k, v in full.seconds.items()}, "load": round(load, 2),
    }


def _one_size(args: argparse.Namespace, size: int, say: Any) -> dict[str, Any]:
    """Start Spark as ``edgeq pipeline run`` would for a journal of ``size`` rows and time one
    phase of :func:`run_size` in it."""
    t0 = time.perf_counter()
    conf = {"spark.driver.memory": args.driver_memory} if args.master.startswith("local") else {}
    conf["spark.ui.showConsoleProgress"] = "false"
    rows = {"auto": size, "quick": 0, "default": None}[args.jvm]  # what jvm_conf is told
    # the rows it reads, as edgeq pipeline run counts them
    if args.jvm == "auto" and args.phase == "incremental":
        from edgeq.sync.pipeline.job.runner import check_journal, rows_to_read

        _, journal, _, out = _paths(args.dir, size, args.grow)
        rows = rows_to_read([check_journal(str(journal))], str(out))
    events = (Path(tempfile.mkdtemp(prefix="edgeq-bench-events-"))
              if args.tasks and args.phase != "floor" else None)
    try:
        return _timed(args, size, say, conf, rows, events, t0)
    finally:
        if events is not None:
            shutil.rmtree(events, ignore_errors=True)


def _timed(args: argparse.Namespace, size: int, say: Any, conf: dict[str, str], rows: int | None,
           events: Path | None, t0: float) -> dict[str, Any]:
    """:func:`_one_size`'s run, in a JVM started with ``conf`` for ``rows``; with ``events``, its
    event log there and the executors' task time (:func:`task_seconds`) in the result."""
    from edgeq.sync.pipeline.job.runner import spark_session
    from edgeq.sync.pipeline.job.session import QUICK_JIT

    if events is not None:
        conf = conf | {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                       "spark.eventLog.compress": "false"}
    spark = spark_session(args.master, conf=conf, journal_rows=rows)
    started_s = round(time.perf_counter() - t0, 1)
    cores = spark.sparkContext.defaultParallelism
    jvm = "quick JIT (C1 only)" if QUICK_JIT in spark.sparkContext.getConf().get(
        "spark.driver.extraJavaOptions", "") else "default JIT"
    print(f"Spark started in {started_s:.1f} s ({args.master}, {jvm}, load {os.getloadavg()[0]:.2f})",
          file=sys.stderr, flush=True)
    try:
        if args.phase == "floor":
            _, journal, _, _ = _paths(args.dir, size, args.grow)
            with tempfile.TemporaryDirectory(prefix="edgeq-floor-") as out:
                return spark_floor(spark, journal, Path(out)) | {"spark_start_s": started_s, "jvm": jvm}
        row = run_size(spark, args.dir, size, grow=args.grow, say=say, phase=args.phase)
    finally:
        spark.stop()
    key = "spark_start_s" if args.phase == "full" else "incremental_spark_start_s"
    row |= {key: started_s, "jvm": jvm}
    if events is not None:  # written whole once the context has stopped
        prefix = "" if args.phase == "full" else "incremental_"
        row |= {prefix + k: v for k, v in (task_seconds(events) | {"cores": cores}).items()}
    return row


def _child(args: argparse.Namespace, root: Path, size: int, phase: str) -> dict[str, Any] | None:
    """One phase of one size in a process (a JVM) of its own, as each ``edgeq pipeline run``
    is: a JVM's options are fixed when it starts (pyspark keeps one per process) and chosen
    by the rows the run reads (session.jvm_conf, job.rows_to_read), and an incremental run
    starts cold like any other run, not in the JVM the full run warmed up."""
    command = [sys.executable, "-m", "benchmarks.pipeline_bench", "--one", str(size), "--phase", phase,
               "--dir", str(root), "--grow", str(args.grow), "--master", args.master,
               "--driver-memory", args.driver_memory, "--jvm", args.jvm] + (["--tasks"] if args.tasks else [])
    child = subprocess.run(command + (["--quiet"] if args.quiet else []), stdout=subprocess.PIPE, text=True)
    if child.returncode != 0:
        print(f"the {size:,}-row {phase} run failed (exit {child.returncode})", file=sys.stderr)
        return None
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


def _tasks(row: dict[str, Any], prefix: str) -> str:
    """``--tasks``' figures of one run, as printed (empty without them)."""
    if prefix + "task_s" not in row:
        return ""
    task, cores = row[prefix + "task_s"], row[prefix + "cores"]
    return (f"\n{'':>12}   tasks {task:.1f} s (CPU {row[prefix + 'task_cpu_s']:.1f} s) on {cores} cores: "
            f"at least {task / cores:.1f} s of wall time")


def _measure(args: argparse.Namespace, root: Path, size: int) -> dict[str, Any] | None:
    """The full run of ``size`` rows, then (``--grow``) the incremental run, each in its own JVM."""
    row = _child(args, root, size, "full")
    if row is None:
        return None
    print(f"{row['rows']:>12,} rows  {row['seconds']:8.1f} s  {row['rows_per_s']:>12,} rows/s  (full, "
          f"load {row['load']:.2f})" + _tasks(row, ""), flush=True)
    if args.grow:
        inc = _child(args, root, size, "incremental")
        if inc is None:
            return None
        inc["incremental_jvm"] = inc.pop("jvm", None)  # chosen by the rows it reads: maybe not the full run's
        row |= inc | {"incremental_ratio": round(inc["incremental_seconds"] / row["seconds"], 3)}
        print(f"{row['grown_rows']:>12,} new   {row['incremental_seconds']:8.1f} s  "
              f"{row['incremental_ratio']:>12.1%} of the full run  (incremental, load "
              f"{row['incremental_load']:.2f})"
              + _tasks(row, "incremental_"), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.pipeline_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1M,10M",
                        help="comma-separated sizes, e.g. 5k,1M,10M (default 1M,10M)")
    parser.add_argument("--grow", type=float, default=0.01,
                        help="then an incremental run over a journal grown by this fraction (default 0.01; "
                             "0: none)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to generate (default: a temporary directory)")
    parser.add_argument("--generate-only", action="store_true", help="only write the synthetic journal")
    parser.add_argument("--driver-memory", default="4g",
                        help="spark.driver.memory for local masters (default 4g)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines, only the results")
    parser.add_argument("--jvm", choices=("auto", "quick", "default"), default="auto",
                        help="the JVM's compiler: as edgeq pipeline run chooses it by the journal's size "
                             "(auto), or C1 only (quick), or the JVM's default, whatever the size")
    # one size, in a child process
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true",
                        help="also time Spark's own cost in a fresh JVM: start-up, then 12 small distinct "
                             "queries over the first size's journal (what bounds a run over a small journal)")
    parser.add_argument("--tasks", action="store_true",
                        help="also sum the executors' task time of each run (Spark's event log): divided by "
                             "the cores, the least wall time the run's work could take")
    parser.add_argument("--phase", choices=("full", "incremental", "floor"), default="full",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    sizes = [_size(s) for s in args.rows.split(",")]
    if args.one is not None:  # a child of the run below: one phase of one size, in this process's own JVM
        print(json.dumps(_one_size(args, args.one, say)))
        return 0
    root = args.dir or Path(tempfile.mkdtemp(prefix="edgeq-pipeline-bench-"))
    results = []
    try:
        for size in sizes:
            if args.generate_only:
                generate(root / f"journal-{size}-{int(size * args.grow)}", size + int(size * args.grow),
                         last_rows=int(size * args.grow))
                continue
            row = _measure(args, root, size)
            if row is None:
                return 1
            results.append(row)
            if args.floor and size == sizes[0]:
                floor = _child(args, root, size, "floor")
                if floor is None:
                    return 1
                results.append({"spark_floor": floor})
                rest = sorted(floor["seconds"][1:])
                print(
                    f"Spark alone (a fresh JVM, {floor['jvm']}): started in {floor['spark_start_s']:.1f} s; "
                    f"a first small query over the {size:,}-row journal {floor['seconds'][0]:.1f} s, "
                    f"{len(rest)} more distinct ones {rest[len(rest) // 2]:.2f} s each (median), "
                    f"{sum(floor['seconds']):.1f} s in all", flush=True)
    finally:
        if args.dir is None and not args.generate_only:
            shutil.rmtree(root, ignore_errors=True)
    machine = f"{platform.machine()}, {platform.python_version()}, master {args.master}"
    print(json.dumps({"machine": machine, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
