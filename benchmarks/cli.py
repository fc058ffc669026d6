"""``python -m benchmarks``: run the cases, print the table, write the JSON.

Examples::

    python -m benchmarks                      # the full run (1M backlogs: 15-25 minutes)
    python -m benchmarks --smoke              # tiny sizes, well under 30 s
    python -m benchmarks --only get_confirm --sizes 1k,100k
    python -m benchmarks --only put_single --libs edgeq,raw-sqlite
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

from benchmarks.cases import CASES, runner_of
from benchmarks.config import FULL, SMOKE, Settings
from benchmarks.machine import describe_machine, fsync_probe
from benchmarks.peers import ALL_LIBS
from benchmarks.report import render
from benchmarks.results import Result
from benchmarks.runner import ROOT, Context
from benchmarks.targets import evaluate

__all__ = ["main", "parse_sizes"]

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "latest.json"


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1k,40k,1M"`` -> ``(1000, 40000, 1000000)``.

    >>> parse_sizes("1k, 100k,1M,250")
    (1000, 100000, 1000000, 250)
    """
    scale = {"k": 1_000, "m": 1_000_000}
    out = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if not part:
            continue
        factor = scale.get(part[-1], 1)
        number = part[:-1] if part[-1] in scale else part
        value = int(float(number) * factor)
        if value < 1:
            raise argparse.ArgumentTypeError(f"sizes must be positive, not {part!r}")
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError("give at least one size")
    return tuple(out)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (backlog 1k max), < 30 s")
    p.add_argument("--only", action="append", choices=sorted(CASES), metavar="CASE",
                   help=f"run only this case (repeatable): {', '.join(CASES)}")
    p.add_argument("--sizes", type=parse_sizes,
                   help="backlog sizes, e.g. 1k,40k,100k,1M (the largest also sizes depth and memory)")
    p.add_argument("--libs", type=lambda t: [x.strip() for x in t.split(",") if x.strip()],
                   help=f"libraries to measure (default all): {', '.join(ALL_LIBS)}")
    p.add_argument("--ops", type=int,
                   help="operations per timed loop (puts, get+confirms; thread cases: in all)")
    p.add_argument("--threads", type=parse_sizes,
                   help="thread counts of the thread-scaling cases, e.g. 1,8 (default 1,2,4,8,16; smoke 1,4)")
    p.add_argument("--expiry", type=parse_sizes, help="expired messages to discard, e.g. 1M")
    p.add_argument("--budget", type=float, help="seconds a timed loop may run before stopping early")
    p.add_argument("--rounds", type=int, help="rounds per case, median reported (default 3; smoke 1)")
    p.add_argument("--slowsync-us", type=parse_sizes,
                   help="put_threads_slowsync: µs the slowsync shim adds to every flush (default 3000)")
    p.add_argument("--sync-messages", type=parse_sizes,
                   help="messages the sync case pushes (edgeq) and publishes (MQTT), e.g. 20k (default 20k; "
                        "smoke 500)")
    p.add_argument("--fleet-workers", type=parse_sizes,
                   help="fleet case: edgeq serve --workers values, e.g. 1,2")
    p.add_argument("--no-install", action="store_true",
                   help="never apt-get install mosquitto (the sync case's MQTT baseline) when it is missing")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON report (default %(default)s)")
    p.add_argument("--markdown", type=Path, help="also write the table here (default: next to --out, .md)")
    p.add_argument("--workdir", type=Path, help="scratch directory for the queues (default under results/)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory afterwards")
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    """The preset chosen by ``--smoke``, with the command-line overrides applied."""
    s = SMOKE if args.smoke else FULL
    if args.sizes:
        s = s.replace(sizes=args.sizes)
        if s.target_backlog not in args.sizes:
            s = s.replace(target_backlog=args.sizes[0] if len(args.sizes) == 1 else sorted(args.sizes)[1])
    if args.ops:
        s = s.replace(put_ops=args.ops, get_ops=args.ops, thread_ops=args.ops)
    if args.threads:
        s = s.replace(thread_counts=args.threads)
    if args.expiry:
        s = s.replace(expiry_messages=args.expiry[0])
    if args.budget:
        s = s.replace(budget_s=args.budget)
    if args.rounds:
        s = s.replace(rounds=max(1, args.rounds))
    if args.slowsync_us:
        s = s.replace(slowsync_us=args.slowsync_us[0])
    if args.sync_messages:
        s = s.replace(sync_messages=args.sync_messages[0])
    if args.no_install:
        s = s.replace(install_mosquitto=False)
    if args.fleet_workers:
        s = s.replace(fleet_workers=tuple(args.fleet_workers))
    return s


def main(argv: list[str] | None = None) -> int:
    """Run the selected cases; return 0 (the verdicts are in the report, not the exit code).

    Returns 2 without measuring anything when a full run includes the sync case
    and its MQTT baseline cannot be set up (paho-mqtt missing, mosquitto missing
    and not installable): a clear error rather than a table without its peer.
    """
    args = _parser().parse_args(argv)
    settings = settings_from(args)
    libs = args.libs or list(ALL_LIBS)
    unknown = [lib for lib in libs if lib not in ALL_LIBS]
    if unknown:
        _parser().error(f"unknown libraries {unknown}; choose from {', '.join(ALL_LIBS)}")
    cases = args.only or list(CASES)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    workdir: Path = args.workdir or out.parent / f"work-{int(time.time())}"
    workdir.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    ctx = Context(settings=settings, libs=libs, workdir=workdir, log=log)
    if "sync" in cases and {"mqtt", "mqtt-periodic"} & set(libs) and not settings.smoke:
        # A full run without its MQTT baseline is useless for the sync target: fail now, not after 15 minutes.
        from benchmarks.cases.sync import mqtt_availability

        binary, why = mqtt_availability(ctx)
        if binary is None:
            shutil.rmtree(workdir, ignore_errors=True)
            print(f"error: the sync case's MQTT baseline cannot run: {why}\n"
                  "(use --smoke, or --libs without mqtt, to run without it)", file=sys.stderr)
            return 2
    started = time.strftime("%Y-%m-%d %H:%M:%S %z")
    t0 = time.perf_counter()
    results: list[Result] = []
    try:
        fsync_before = fsync_probe(workdir)
        for case in cases:
            log(f"case {case}")
            results += runner_of(case)(ctx)
        machine = describe_machine(workdir)
        fsync_after = fsync_probe(workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    targets = evaluate(results, settings)
    meta = {
        "mode": "smoke" if settings.smoke else "full",
        "started": started,
        "duration_s": round(time.perf_counter() - t0, 1),
        "command": "python -m benchmarks " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "python_executable": sys.executable,
        "machine": machine["summary"],
        "machine_detail": machine,
        "fsync_before": fsync_before,
        "fsync_after": fsync_after,
        "cases": cases,
        "libs": libs,
    }
    report = {
        "meta": meta,
        "settings": settings.to_json(),
        "results": [r.to_json() for r in results],
        "targets": [t.to_json() for t in targets],
    }
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    text = render(results, targets, meta)
    markdown: Path = args.markdown or out.with_suffix(".md")
    markdown.write_text(text, encoding="utf-8")
    print(text)
    log(f"done in {meta['duration_s']} s: {out} and {markdown}")
    return 0
