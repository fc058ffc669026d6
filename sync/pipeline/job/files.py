"""The file operations the job does itself, on the local disk (:mod:`pathlib`) or through Hadoop's
``FileSystem`` in the driver's JVM (``hdfs://``, ``s3a://``, ...)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Files", "HadoopFiles", "LocalFiles", "files_for", "is_local", "join", "local_path"]


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local disk.

    >>> is_local("journal/"), is_local("file:///tmp/j"), is_local("hdfs:///edgeq/j")
    (True, True, False)
    """
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> Path:
    """A local path without its ``file://`` scheme.

    >>> local_path("file:///tmp/j")
    PosixPath('/tmp/j')
    """
    return Path(path.removeprefix("file://"))


def join(base: str, *names: str) -> str:
    """``base/names...`` for a path or a URI.

    >>> join("hdfs:///edgeq/out/", "_state", "g1")
    'hdfs:///edgeq/out/_state/g1'
    """
    return "/".join([base.rstrip("/"), *names])


class Files(Protocol):
    """What the job needs of a file system."""

    def list_files(self, root: str, pattern: str) -> list[tuple[str, int]]:
        """``(path relative to root, size in bytes)`` of the files matching the glob ``pattern``."""
        ...

    def read_text(self, path: str) -> str | None:
        """A small text file's content, or None if it does not exist."""
        ...

    def write_text(self, path: str, text: str) -> None:
        """Write a small text file atomically: a reader sees the old content or the new."""
        ...

    def exists(self, path: str) -> bool:
        ...

    def delete(self, path: str) -> None:
        """Delete a file or a directory tree (nothing if it does not exist)."""
        ...

    def children(self, path: str) -> list[str]:
        """The names directly under a directory (empty if it does not exist)."""
        ...


class LocalFiles:
    """:class:`Files` on the local disk."""

    def list_files(self, root: str, pattern: str) -> list[tuple[str, int]]:
        base = local_path(root)
        return sorted((p.relative_to(base).as_posix(), p.stat().st_size)
                      for p in base.glob(pattern) if p.is_file())

    def read_text(self, path: str) -> str | None:
        try:
            return local_path(path).read_text("utf-8")
        except FileNotFoundError:
            return None

    def write_text(self, path: str, text: str) -> None:
        target = local_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(text, "utf-8")
        os.replace(tmp, target)

    def exists(self, path: str) -> bool:
        return local_path(path).exists()

    def delete(self, path: str) -> None:
        import shutil

        target = local_path(path)
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        elif target.exists():
            target.unlink()

    def children(self, path: str) -> list[str]:
        target = local_path(path)
        return sorted(p.name for p in target.iterdir()) if target.is_dir() else []


class HadoopFiles:
    """:class:`Files` through Hadoop's ``FileSystem`` in the driver's JVM (HDFS, S3A, ...)."""

    def __init__(self, spark: SparkSession) -> None:
        context = spark.sparkContext
        self._jvm: Any = context._jvm
        self._conf: Any = context._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> tuple[Any, Any]:
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(self._conf), jpath

    def list_files(self, root: str, pattern: str) -> list[tuple[str, int]]:
        fs, base = self._fs(root)
        statuses = fs.globStatus(self._jvm.org.apache.hadoop.fs.Path(join(root, pattern))) or []
        prefix = str(fs.makeQualified(base).toString()).rstrip("/") + "/"
        out = []
        for status in statuses:
            if status.isFile():
                full = str(status.getPath().toString())
                out.append((full.removeprefix(prefix), int(status.getLen())))
        return sorted(out)

    def read_text(self, path: str) -> str | None:
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return None
        stream = fs.open(jpath)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        # Write aside, then rename: a rename within a directory is atomic on HDFS; on object
        # stores it is a copy, which is why the state's manifests are new files, never replaced.
        fs, jpath = self._fs(path)
        tmp = self._jvm.org.apache.hadoop.fs.Path(
            jpath.getParent(), f".{jpath.getName()}.{uuid.uuid4().hex}.tmp")
        stream = fs.create(tmp, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        if fs.exists(jpath):
            fs.delete(jpath, False)
        fs.rename(tmp, jpath)

    def exists(self, path: str) -> bool:
        fs, jpath = self._fs(path)
        return bool(fs.exists(jpath))

    def delete(self, path: str) -> None:
        fs, jpath = self._fs(path)
        if fs.exists(jpath):
            fs.delete(jpath, True)

    def children(self, path: str) -> list[str]:
        fs, jpath = self._fs(path)
        if not fs.exists(jpath):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(jpath))


def files_for(path: str, spark: SparkSession | None) -> Files:
    """The :class:`Files` for ``path``: local, or Hadoop's through ``spark``."""
    if is_local(path):
        return LocalFiles()
    if spark is None:
        raise ValueError(f"{path} is not local: reaching it needs a Spark session")
    return HadoopFiles(spark)
