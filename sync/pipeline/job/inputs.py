"""Finding, checking and reading exported journals, each known by the server its manifest names
(docs/pipeline.md, 'Export layout')."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgeq.sync.pipeline.errors import JournalNotFound, MalformedJournal
from edgeq.sync.pipeline.export.layout import (
    COLUMN_TYPES,
    CONTACT_TYPES,
    CONTACTS,
    MANIFEST,
    REQUIRED,
    Part,
    parse_part,
)
from edgeq.sync.pipeline.job.files import Files, is_local, join, local_path
from edgeq.sync.pipeline.job.session import first_line, spark_errors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "Journal",
    "JournalConflict",
    "check_arguments",
    "check_journal",
    "check_part_files",
    "check_servers",
    "find_journal",
    "journal_rows",
    "read_contacts",
    "read_parts",
    "spark_schema",
]


class JournalConflict(MalformedJournal):
    """``--journal`` and ``--out`` arguments that cannot go together (a usage error)."""


@dataclass(slots=True)
class Journal:
    """An export directory: its committed part files, and what its manifest says."""

    path: str
    parts: list[Part] = field(default_factory=list)
    server: str | None = None
    watermark: int | None = None
    #: whether the export holds the server's device records (:data:`~.layout.CONTACTS`; not
    #: before this edgeq's export)
    contacts: bool = False

    @property
    def key(self) -> str:
        """The server this journal's manifest names ("" if none): what tells it from another."""
        return self.server or ""

    @property
    def label(self) -> str:
        """The journal for messages: its server's name, else its path."""
        return self.server or self.path

    def rows_hint(self) -> str:
        if not self.parts:
            return "no part files"
        return (f"{len(self.parts):,} part file(s), journal ids {self.parts[0].first:,} "
                f"to {max(p.last for p in self.parts):,}")


def journal_rows(journals: Sequence[Journal]) -> int:
    """About how many rows ``journals`` hold, from their part files' names: sizes a run early.

    >>> journal_rows([Journal("j", [Part(1, 4096, "a", 1), Part(4097, 5000, "b", 1)])])
    5000
    """
    return sum(max(p.last for p in j.parts) - min(p.first for p in j.parts) + 1 for j in journals if j.parts)


def _local_precheck(path: str) -> None:
    root = local_path(path)
    if not root.exists():
        raise JournalNotFound(
            f"{root} does not exist: export the home server's journal first, "
            f"e.g. edgeq export --db home.db --out {root}"
        )
    if not root.is_dir():
        raise MalformedJournal(f"{root} is not a directory: --journal is the directory edgeq export wrote")


def find_journal(path: str, files: Files) -> Journal:
    """The export directory at ``path``: its committed part files (in id order) and its manifest."""
    if is_local(path):
        _local_precheck(path)
    text = files.read_text(join(path, MANIFEST))
    manifest: dict[str, Any] = {}
    if text is not None:
        try:
            manifest = json.loads(text)
            if not isinstance(manifest, dict) or not isinstance(manifest.get("watermark"), int):
                raise ValueError("no integer 'watermark'")
        except ValueError as exc:
            raise MalformedJournal(
                f"{join(path, MANIFEST)} is damaged ({exc}): export into a new directory"
            ) from None
    watermark = manifest.get("watermark")
    parts = []
    for relative, size in files.list_files(path, "date=*/*.parquet"):
        part = parse_part(relative, size)
        if part is not None and (watermark is None or part.last <= watermark):
            parts.append(part)
    if not parts:
        stray = [name for name, _ in files.list_files(path, "*.parquet") if not name.startswith("_")][:1]
        if stray:
            raise MalformedJournal(
                f"{path} holds Parquet files but not in edgeq export's "
                f"date=YYYY-MM-DD/part-FIRST-LAST.parquet layout (e.g. {stray[0]}): export with edgeq export"
            )
        hint = "it holds no entries yet" if text is not None else "it is not an export"
        raise JournalNotFound(
            f"{path} has no journal files ({hint}): run edgeq export --db home.db --out {path}")
    server = manifest.get("server")
    return Journal(path, sorted(parts), server if isinstance(server, str) else None, watermark,
                   files.exists(join(path, CONTACTS)))


def check_part_files(journal: str, parts: list[Part]) -> bool:
    """Check local part files' columns and types with pyarrow before Spark reads them; return
    whether their footers rule out a null in a required column (False without pyarrow, or remote)."""
    if not is_local(journal):
        return False
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return False
    root = local_path(journal)
    no_nulls = True
    for part in parts:
        file = root / part.name
        try:
            meta = pq.read_metadata(file)
            schema = meta.schema.to_arrow_schema()
        except Exception as exc:  # pyarrow raises ArrowInvalid / OSError on a damaged file
            raise MalformedJournal(
                f"{file} is not a readable Parquet file ({first_line(exc)}): delete it and its directory's "
                "export, or re-export into a new directory"
            ) from exc
        found = {f.name: str(f.type) for f in schema}
        missing = [n for n in COLUMN_TYPES if n not in found]
        wrong = [f"{n} is {found[n]}, not {t}"
                 for n, t in COLUMN_TYPES.items() if n in found and found[n] != t]
        if missing or wrong:
            detail = f"missing column(s) {', '.join(missing)}" if missing else "; ".join(wrong)
            raise MalformedJournal(
                f"{file} is not an edgeq journal file ({detail}): "
                "export with edgeq export into a new directory"
            )
        no_nulls = no_nulls and all(not schema.field(n).nullable for n in REQUIRED)
    return no_nulls


def _place(path: str) -> str:
    """Where a journal argument points: a local path resolved, a URI without its trailing slash."""
    return str(local_path(path).resolve()) if is_local(path) else path.rstrip("/")


def check_arguments(journals: Sequence[str], out: str) -> None:
    """Refuse (:class:`JournalConflict`) no journal, one given twice, or ``out`` inside one.

    >>> check_arguments(["journals/HOMEA", "journals/HOMEB/"], "reports")
    >>> try:
    ...     check_arguments(["journals/HOMEA", "journals/./HOMEA"], "reports")
    ... except JournalConflict as refused:
    ...     print(refused)
    --journal journals/./HOMEA is given twice (first as journals/HOMEA): give each server's export once
    """
    if not journals:
        raise JournalConflict("no --journal given: give the directory edgeq export wrote (once per server)")
    seen: dict[str, str] = {}
    for journal in journals:
        place = _place(journal)
        if place in seen:
            first = seen[place]
            raise JournalConflict(
                f"--journal {journal} is given twice (first as {first}): give each server's export once")
        seen[place] = journal
    if is_local(out):
        o_path = local_path(out).resolve()
        for journal in journals:
            j_path = local_path(journal).resolve() if is_local(journal) else None
            if j_path is not None and (o_path == j_path or j_path in o_path.parents):
                raise JournalConflict(
                    f"--out {out} is inside --journal {journal}: write the reports elsewhere")


def check_servers(journals: Sequence[Journal]) -> None:
    """Refuse (:class:`JournalConflict`) several journals not told apart: two of one server, or one
    naming no server. Journals not looked at yet (no parts) are left to the run."""
    if len(journals) < 2:
        return
    looked = [j for j in journals if j.parts]
    for journal in looked:
        if not journal.server:
            raise JournalConflict(
                f"{journal.path} does not say which server's journal it is (no {MANIFEST} naming one): "
                "a run over several journals tells them apart by server; export each with edgeq export"
            )
    by_server: dict[str, Journal] = {}
    for journal in looked:
        if journal.key in by_server:
            raise JournalConflict(
                f"{by_server[journal.key].path} and {journal.path} both hold {journal.key}'s journal: "
                "give each server's export once (edgeq export keeps one directory per server, growing)"
            )
        by_server[journal.key] = journal


def check_journal(path: str, files: Files | None = None) -> Journal:
    """Find a journal and check its part files, as the CLI does before Spark starts; a remote
    journal needs ``files``."""
    from edgeq.sync.pipeline.job.files import LocalFiles

    if files is None:
        if not is_local(path):
            return Journal(path)
        files = LocalFiles()
    journal = find_journal(path, files)
    check_part_files(path, journal.parts)
    return journal


def spark_schema() -> Any:
    """The journal's columns as a Spark schema (``REQUIRED`` ones not nullable)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    types = {"int64": LongType(), "string": StringType()}
    return StructType([StructField(n, types[t], nullable=n not in REQUIRED) for n, t in COLUMN_TYPES.items()])


def read_contacts(spark: SparkSession, journals: Sequence[Journal]) -> DataFrame | None:
    """Each device's last request to any server (``device``, ``last_seen_ms``), or None if none."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    paths = [join(j.path, CONTACTS) for j in journals if j.contacts]
    if not paths:
        return None
    types = {"int64": LongType(), "string": StringType()}
    schema = StructType([StructField(n, types[t], nullable=False) for n, t in CONTACT_TYPES.items()])
    with spark_errors(f"reading the device records beside {', '.join(j.path for j in journals)}"):
        rows = spark.read.schema(schema).parquet(*paths)
        return rows.groupBy("device").agg(F.max("last_seen_ms").alias("last_seen_ms"))


def read_parts(spark: SparkSession, journal: str, parts: list[Part]) -> DataFrame:
    """The journal's part files as one DataFrame."""
    paths = [join(journal, p.name) for p in parts]
    with spark_errors(f"reading {journal}"):
        return spark.read.schema(spark_schema()).parquet(*paths)
