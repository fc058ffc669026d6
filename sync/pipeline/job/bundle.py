"""The Spark job packed for ``spark-submit``, loadable on a driver that has nothing but pyspark.
Built by ``python -m edgeq.sync.pipeline.job.bundle build/``; see docs/pipeline.md, 'Running on a cluster'."""

from __future__ import annotations

import argparse
import ast
import sys
import zipfile
from pathlib import Path

__all__ = ["ENTRY", "ROOTS", "ZIP", "build", "closure", "main"]

ZIP = "edgeq-pipeline.zip"
ENTRY = "edgeq-pipeline-job.py"
#: What the bundle must be able to run: the job, and the summary it prints.
ROOTS = ("edgeq.sync.pipeline.job.runner", "edgeq.sync.pipeline.report.summary")
_PACKAGE = "edgeq.sync.pipeline"
_ALSO = ("edgeq.errors",)
_THIRD_PARTY = ("pyspark", "py4j", "pyarrow")
_STUB = '''"""A stub: this is edgeq's Spark job only (edgeq.sync.pipeline.job.bundle), not edgeq."""\n'''
_ENTRY_TEXT = ('''"""spark-submit's script for edgeq's journal analytics: '''
               '''see docs/pipeline.md, "Running on a cluster"."""

import sys

from edgeq.sync.pipeline.job.runner import main

sys.exit(main())
''')


def _source(module: str) -> Path:
    """The file of an edgeq module, found next to this one (no import needed)."""
    here = Path(__file__).resolve().parents[1]  # edgeq/sync/pipeline
    if module.startswith(_PACKAGE + "."):
        inside = here / module[len(_PACKAGE) + 1:].replace(".", "/")
        return inside / "__init__.py" if inside.is_dir() else inside.with_suffix(".py")
    if module == _PACKAGE:
        return here / "__init__.py"
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"cannot find {module}")
    return Path(spec.origin)


def _imports(path: Path, package: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base]) if base else ".".join(up)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def closure(roots: tuple[str, ...] = ROOTS) -> dict[str, Path]:
    """The edgeq modules ``roots`` need (name -> file); ValueError if one imports what a driver lacks."""
    todo, done = [*roots, _PACKAGE], {}
    while todo:
        name = todo.pop()
        if name in done:
            continue
        path = _source(name)
        if not path.exists():  # "from edgeq.sync.pipeline.x import y": y is a name, not a module
            continue
        done[name] = path
        if name.startswith(_PACKAGE + "."):
            todo.append(name.rpartition(".")[0])  # its package's __init__ too
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in sorted(_imports(path, package)):
            top = target.partition(".")[0]
            also = [a for a in _ALSO if target == a or target.startswith(a + ".")]
            if target.startswith(_PACKAGE + ".") or also:
                todo.append(also[0] if also else target)
            elif target in (_PACKAGE, "edgeq", "edgeq.sync"):
                continue
            elif top == "edgeq":
                raise ValueError(f"{name} imports {target}: the job must load without edgeq's other modules")
            elif top not in sys.stdlib_module_names and top not in _THIRD_PARTY and top != "__future__":
                raise ValueError(f"{name} imports {target}: a Spark driver may not have it")
    return done


def build(folder: Path) -> tuple[Path, Path]:
    """Write the zip and the entry script into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    archive, entry = folder / ZIP, folder / ENTRY
    modules = closure()
    tmp = archive.with_name(f".{archive.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("edgeq/__init__.py", _STUB)
        zf.writestr("edgeq/sync/__init__.py", _STUB)
        for name, path in sorted(modules.items()):
            inside = name.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")
            zf.write(path, inside)
    tmp.replace(archive)
    entry.write_text(_ENTRY_TEXT, "utf-8")
    return archive, entry


def main(argv: list[str] | None = None) -> int:
    """``python -m edgeq.sync.pipeline.job.bundle [DIR]``: build the bundle, print how to submit it."""
    parser = argparse.ArgumentParser(prog="edgeq.sync.pipeline.job.bundle",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="build", help="where to write it (default: build)")
    args = parser.parse_args(argv)
    archive, entry = build(Path(args.folder))
    print(f"wrote {archive} and {entry}; submit with:\n"
          f"  spark-submit --master spark://HOST:7077 --py-files {archive} {entry}"
          " --journal JOURNAL --out OUT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
