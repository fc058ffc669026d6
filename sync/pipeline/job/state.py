"""The state an incremental run keeps in ``OUT/_state/``: generations of datasets, **whole** (small,
several per Spark job: a *bundle*) or **bucketed** (per uid), and a manifest written last."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline.export.layout import Part
from edgeq.sync.pipeline.job.files import Files, join

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession

    from edgeq.sync.pipeline.job.inputs import Journal

__all__ = [
    "DEFAULT_BUCKET_MS",
    "STATE_DIR",
    "STATE_FORMAT",
    "WRITE_OPTIONS",
    "JournalRecord",
    "Plan",
    "State",
    "StateWriter",
    "load_state",
    "plan_run",
]

STATE_DIR = "_state"
#: Bumped whenever what the state holds changes: a state of another format is rebuilt.
#: 2: several journals (per server), and the uid status's ``window_ms``.
#: 3: the partials read off the uid status (audit, gaps, ...) split by bucket like it.
#: 4: the uid status's ``dead_lettered`` and ``discarded``, the audit's ``dead_lettered``.
STATE_FORMAT = 4
_MANIFEST_PREFIX = "state-"

#: The width of a new state's buckets (uid creation time, ms): a day. Narrower buckets make
#: an incremental run cheaper (it re-merges each bucket its new rows touch, whole) and a full
#: run dearer (a file per bucket and dataset): measured on 2 cores over a 10M-row journal of
#: seven days, 6-hour buckets cut an incremental run's state update from 28 s to 16 s and
#: made the full run 20% slower (docs/pipeline.md, "Incremental runs").
DEFAULT_BUCKET_MS = 86_400_000

#: How the state's Parquet files are written: without dictionary encoding. Its columns are
#: mostly per-uid ids and times, nearly all distinct, so a dictionary is built, overflows and is
#: re-encoded plainly: a quarter of the task time of the stage computing and writing the uid
#: status (a JFR profile of a full run over 1M rows on 2 cores); without it that run took 45.0 s
#: against 49.0 s (3 runs each, alternating). The reports keep Spark's default: other tools read them.
WRITE_OPTIONS: dict[str, str] = {"parquet.enable.dictionary": "false"}


@dataclass(slots=True)
class JournalRecord:
    """What the state knows of a journal: where read last, the parts read, its ``window_ms``."""

    path: str
    parts: dict[str, list[int]] = field(default_factory=dict)  # name -> [first, last, size]
    window_ms: int | None = None

    @property
    def max_id(self) -> int:
        return max((v[1] for v in self.parts.values()), default=0)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "parts": self.parts, "window_ms": self.window_ms}


@dataclass(slots=True)
class State:
    """What the previous runs left: the journals read (by server), their parts, and where each dataset is."""

    generation: int = 0
    journals: dict[str, JournalRecord] = field(default_factory=dict)
    bucket_ms: int = 0
    from_ms: int | None = None
    runs: int = 0
    whole: dict[str, str] = field(default_factory=dict)
    bucketed: dict[str, dict[int, list[str]]] = field(default_factory=dict)
    schemas: dict[str, str] = field(default_factory=dict)  # dataset -> Spark schema JSON

    @property
    def empty(self) -> bool:
        return not any(r.parts for r in self.journals.values())

    @property
    def part_count(self) -> int:
        return sum(len(r.parts) for r in self.journals.values())

    def to_json(self) -> str:
        return json.dumps({
            "format": STATE_FORMAT, "generation": self.generation,
            "journals": {k: r.to_dict() for k, r in self.journals.items()},
            "bucket_ms": self.bucket_ms, "from_ms": self.from_ms, "runs": self.runs,
            "whole": self.whole,
            "bucketed": {k: {str(b): p for b, p in v.items()} for k, v in self.bucketed.items()},
            "schemas": self.schemas,
        }, indent=1, sort_keys=True) + "\n"


def _record(raw: dict[str, Any]) -> JournalRecord:
    window = raw.get("window_ms")
    return JournalRecord(str(raw["path"]), {str(k): [int(x) for x in v] for k, v in raw["parts"].items()},
                         None if window is None else int(window))


def _parse(text: str) -> State | None:
    try:
        raw = json.loads(text)
        if raw.get("format") != STATE_FORMAT:
            return None
        return State(
            generation=int(raw["generation"]),
            journals={str(k): _record(v) for k, v in raw["journals"].items()},
            bucket_ms=int(raw["bucket_ms"]), from_ms=raw.get("from_ms"), runs=int(raw["runs"]),
            whole={str(k): str(v) for k, v in raw["whole"].items()},
            bucketed={str(k): {int(b): [str(x) for x in p] for b, p in v.items()}
                      for k, v in raw["bucketed"].items()},
            schemas={str(k): str(v) for k, v in raw["schemas"].items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def load_state(files: Files, out: str) -> tuple[State | None, str]:
    """The current state under ``out`` (None if there is none, or it is unusable) and why not."""
    root = join(out, STATE_DIR)
    manifests = sorted(n for n in files.children(root)
                       if n.startswith(_MANIFEST_PREFIX) and n.endswith(".json"))
    if not manifests:
        return None, "no state from an earlier run"
    text = files.read_text(join(root, manifests[-1]))
    state = _parse(text or "")
    if state is None:
        return None, f"the state {manifests[-1]} is of another format or damaged"
    return state, ""


def part_entries(parts: list[Part]) -> dict[str, list[int]]:
    """The part files a state records: name -> [first id, last id, size]."""
    return {p.name: [p.first, p.last, p.size] for p in parts}


class StateWriter:
    """Writes one run's generation and, at the end, its manifest."""

    def __init__(self, spark: SparkSession, files: Files, out: str, previous: State | None) -> None:
        self.spark, self.files = spark, files
        self.root = join(out, STATE_DIR)
        self.previous = previous or State()
        # Numbered past every generation and manifest present (a rebuild's too), so that the
        # newest manifest is always the current state.
        numbers = [int(n[1:]) for n in files.children(self.root) if n.startswith("g") and n[1:].isdigit()]
        numbers += [int(n[len(_MANIFEST_PREFIX):-5]) for n in files.children(self.root)
                    if n.startswith(_MANIFEST_PREFIX) and n[len(_MANIFEST_PREFIX):-5].isdigit()]
        self.generation = max([self.previous.generation, *numbers]) + 1
        self.dir = join(self.root, f"g{self.generation:06d}")
        # A generation directory with no manifest is a dead run's: start clean.
        self.files.delete(self.dir)

    def path(self, name: str) -> str:
        return join(self.dir, name)

    def write_bundle(self, state: State, bundle: str, frames: dict[str, DataFrame], *,
                     buckets: set[int] | None = None) -> None:
        """Write several datasets in one Spark job, split into ``dataset=NAME`` directories
        (and ``b=BUCKET`` with ``buckets``, replacing those as :meth:`write_bucketed` does)."""
        from pyspark.sql import functions as F

        types: dict[str, Any] = {}
        for name, frame in frames.items():
            if not name.isidentifier():  # it names a directory and a SQL literal
                raise ValueError(f"a dataset's name must be an identifier, not {name!r}")
            for f in frame.schema.fields:
                if types.setdefault(f.name, f.dataType) != f.dataType:
                    raise ValueError(f"column {f.name} of {name} is {f.dataType}, elsewhere {types[f.name]}")
        target = self.path(bundle)
        with _union_all(self.spark, frames, types) as union:
            if buckets is None:
                _writer(union.coalesce(1)).partitionBy("dataset").parquet(target)
            else:
                _writer(union.withColumn("b", F.col("bucket"))).partitionBy("dataset", "b").parquet(target)
        written = {child[len("dataset="):] for child in self.files.children(target)
                   if child.startswith("dataset=")}
        for name, frame in frames.items():
            state.schemas[name] = frame.schema.json()
            if buckets is None:
                state.whole[name] = join(target, f"dataset={name}") if name in written else ""
            else:
                self._replace_buckets(state, name, join(target, f"dataset={name}"), buckets)

    def _replace_buckets(self, state: State, name: str, target: str, buckets: set[int]) -> None:
        """Point ``name``'s buckets at ``target/b=N`` (those written), dropping the ``buckets`` not."""
        written = {int(child[2:]) for child in self.files.children(target) if child.startswith("b=")}
        current = state.bucketed.setdefault(name, {})
        for bucket in buckets | written:
            current[bucket] = [join(target, f"b={bucket}")] if bucket in written else []
            if not current[bucket]:
                del current[bucket]

    def write_bucketed(self, state: State, name: str, frame: DataFrame, buckets: set[int]) -> None:
        """Write ``frame`` (with a ``bucket`` column) by bucket, replacing the state's
        files for every bucket in ``buckets`` (one left with no rows is dropped)."""
        from pyspark.sql import functions as F

        target = self.path(name)
        _writer(frame.withColumn("b", F.col("bucket"))).partitionBy("b").parquet(target)
        self._replace_buckets(state, name, target, buckets)
        state.schemas[name] = frame.schema.json()

    def commit(self, state: State) -> None:
        """Write the manifest, then delete what no manifest names any more."""
        state.generation = self.generation
        self.files.write_text(join(self.root, f"{_MANIFEST_PREFIX}{self.generation:06d}.json"),
                              state.to_json())
        paths = [*(p for p in state.whole.values() if p),
                 *(p for v in state.bucketed.values() for ps in v.values() for p in ps)]
        used = {self.dir} | {join(self.root, generation_of(p)) for p in paths}
        for child in self.files.children(self.root):
            full = join(self.root, child)
            if (child.startswith("g") and full not in used) or (
                    child.startswith(_MANIFEST_PREFIX)
                    and child != f"{_MANIFEST_PREFIX}{self.generation:06d}.json"):
                self.files.delete(full)


def _quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier.

    >>> _quoted("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


def _writer(frame: DataFrame) -> DataFrameWriter:
    """How every state dataset is written: replacing its directory, with :data:`WRITE_OPTIONS`."""
    return frame.write.options(**WRITE_OPTIONS).mode("overwrite")


@contextmanager
def _union_all(spark: SparkSession, frames: dict[str, DataFrame],
               types: dict[str, Any]) -> Iterator[DataFrame]:
    """The frames' union with every column of ``types`` (null where a frame has none) and a
    ``dataset`` column, made by one SQL statement: see docs/pipeline.md, 'Performance'."""
    token = uuid.uuid4().hex
    views = {name: f"edgeq_bundle_{token}_{i}" for i, name in enumerate(frames)}
    selects = []
    try:
        for name, frame in frames.items():
            frame.createOrReplaceTempView(views[name])
            have = set(frame.columns)
            columns = [_quoted(c) if c in have else f"CAST(NULL AS {t.simpleString()}) AS {_quoted(c)}"
                       for c, t in types.items()]
            # ``name`` is an identifier (write_bundle checks): a literal as it is.
            selects.append(f"SELECT {', '.join(columns)}, '{name}' AS dataset FROM {views[name]}")
        yield spark.sql(" UNION ALL ".join(selects))
    finally:
        for view in views.values():
            spark.catalog.dropTempView(view)


def read_dataset(spark: SparkSession, state: State, name: str,
                 buckets: set[int] | None = None) -> DataFrame | None:
    """A state dataset (only ``buckets`` of a bucketed one, if given), or None if there is none."""
    from pyspark.sql.types import StructType

    if name in state.whole:
        paths = [state.whole[name]] if state.whole[name] else []  # "": written empty
    else:
        chosen = state.bucketed.get(name, {})
        paths = [p for b, ps in chosen.items() if buckets is None or b in buckets for p in ps]
    if name not in state.schemas:
        return None
    schema = StructType.fromJson(json.loads(state.schemas[name]))
    if not paths:  # known, but empty (e.g. no bucket has expired rows): an empty frame of its shape
        from pyspark.sql import functions as F

        return spark.range(0).select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields))
    return spark.read.schema(schema).parquet(*paths)


def generation_of(path: str) -> str:
    """The generation directory a state path is in.

    >>> generation_of("out/_state/g000007/uids/b=3")
    'g000007'
    """
    return path.split(f"/{STATE_DIR}/", 1)[1].split("/")[0]


@dataclass(slots=True)
class Plan:
    """What a run will do: ``incremental`` (merge ``new`` parts into ``state``) or a full run, and why."""

    incremental: bool
    new: dict[str, list[Part]]
    state: State
    reason: str

    @property
    def new_parts(self) -> int:
        """The part files this run reads, of every journal."""
        return sum(len(parts) for parts in self.new.values())


def _names(keys: set[str]) -> str:
    return ", ".join(sorted(k or "(a journal naming no server)" for k in keys))


def _misfit(journals: list[Journal], previous: State) -> str | None:
    """Why the state does not fit these journals (None: it does)."""
    before, now = set(previous.journals), {j.key for j in journals}
    if before != now:
        if len(before) == len(now) == 1:
            return (f"the state is of server {_names(before)}'s journal, this is {_names(now)}'s")
        why = [f"journal(s) added since the last run: {_names(now - before)}" if now - before else "",
               f"journal(s) no longer given: {_names(before - now)}" if before - now else ""]
        return "; ".join(w for w in why if w)
    for journal in journals:
        record = previous.journals[journal.key]
        of = f"{journal.label}: " if len(journals) > 1 else ""
        present = {p.name: p for p in journal.parts}
        changed = [n for n, (_, _, size) in record.parts.items() if n in present and present[n].size != size]
        if changed:
            return f"{of}{changed[0]} changed since it was read (re-exported?)"
        early = [p for p in journal.parts if p.name not in record.parts and p.first <= record.max_id]
        if early:
            return f"{of}{early[0].name} holds journal ids the state has passed (up to {record.max_id:,})"
    return None


def plan_run(journals: list[Journal], previous: State | None, why: str, bucket_ms: int | None = None) -> Plan:
    """Incremental run if the state fits (same servers' journals, no part read changed, new parts after
    those read), else a full one; ``bucket_ms`` None: the state's, else :data:`DEFAULT_BUCKET_MS`."""
    width = bucket_ms or (previous.bucket_ms if previous is not None else DEFAULT_BUCKET_MS)
    fresh = State(journals={j.key: JournalRecord(j.path) for j in journals}, bucket_ms=width)
    everything = {j.key: list(j.parts) for j in journals}
    if previous is None:
        return Plan(False, everything, fresh, why)
    if previous.bucket_ms != width:
        return Plan(False, everything, fresh, "the state was kept in other buckets")
    misfit = _misfit(journals, previous)
    if misfit is not None:
        return Plan(False, everything, fresh, misfit)
    new = {j.key: [p for p in j.parts if p.name not in previous.journals[j.key].parts] for j in journals}
    count = sum(map(len, new.values()))
    return Plan(True, new, previous, f"{count:,} new part file(s) since the last run")
