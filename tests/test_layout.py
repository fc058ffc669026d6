"""The package's shape: no import circle anywhere (imports under TYPE_CHECKING and
inside functions count too), nothing below the facade imports it, and the facade is one
class of the application's verbs (the sync-only ones behind ``qm.exchange``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"edgeq": "edgeq", "rules": "edgeq.rules", "sync": "edgeq.sync"}
#: QueueManager's public verbs (methods and properties): a new one is a decision, not a drift.
MAX_VERBS = 67  # 67: dlq_give_up (an out-bridge dead-letters what its broker never takes)


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base]) if base else ".".join(up)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_no_import_circle() -> None:
    edges = graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt):], nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_only_the_facades_users_import_it() -> None:
    edges = graph()
    users = {n for n, deps in edges.items() if "edgeq.manager" in deps}
    # its users: the command line, the sync layer, and the asyncio API (edgeq.aio wraps it)
    below = {n for n in users
             if not n.startswith(("edgeq.sync", "edgeq.cli")) and n not in ("edgeq", "edgeq.aio")}
    assert below == set(), "the core's parts and the rules must not import the facade"


#: The vocabulary every layer may use: it imports nothing of edgeq but itself.
DEFINITIONS = tuple(f"edgeq.{m}" for m in (
    "errors", "types", "values", "names", "args", "uid", "message", "results", "expiry", "clock", "crypto"))
#: Each layer (a module-name prefix) and the prefixes it may import, besides itself.
LAYERS: dict[str, tuple[str, ...]] = {
    **{d: DEFINITIONS for d in DEFINITIONS},
    "edgeq.encoding": DEFINITIONS,
    "edgeq.rules": DEFINITIONS,
    "edgeq.store": (*DEFINITIONS, "edgeq.encoding"),
    "edgeq.sync.pipeline": ("edgeq.errors", "edgeq.store", "edgeq.types", "edgeq.sync.pipeline"),
    # the bridges: a user of the facade (its public verbs), their definitions in the store's edgeq_meta
    "edgeq.sync.bridges": (*DEFINITIONS, "edgeq.store", "edgeq.manager"),
}
#: Who may not import whom (prefixes): the core knows nothing of sync or the command line,
#: the device's agent and the home server share only edgeq.sync's top-level modules.
FORBIDDEN = (
    ("edgeq.store", "edgeq.manager"),
    ("edgeq.sync", "edgeq.cli"),
    ("edgeq.sync.agent", "edgeq.sync.server"),
    ("edgeq.sync.server", "edgeq.sync.agent"),
    ("edgeq.sync.pipeline", "edgeq.sync.agent"),
    ("edgeq.sync.pipeline", "edgeq.sync.server"),
    ("edgeq.sync.pipeline", "edgeq.sync.bridges"),
)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_each_layer_imports_only_what_is_below_it() -> None:
    wrong = []
    for name, deps in graph().items():
        for layer, allowed in LAYERS.items():
            if _under(name, layer):
                wrong += [f"{name} -> {d}" for d in deps if not any(_under(d, a) for a in (layer, *allowed))]
        core = not _under(name, "edgeq.sync") and not _under(name, "edgeq.cli")
        if core and name not in ("edgeq", "edgeq.__main__"):
            wrong += [f"{name} -> {d}" for d in deps if _under(d, "edgeq.sync") or _under(d, "edgeq.cli")]
        for low, high in FORBIDDEN:
            if _under(name, low):
                wrong += [f"{name} -> {d}" for d in deps if _under(d, high)]
    assert sorted(set(wrong)) == []


#: A newcomer reads a folder at a glance and a module in one sitting.
MAX_MODULES_PER_FOLDER = 20
MAX_MODULE_LINES = 450


def test_folders_and_modules_stay_small() -> None:
    folders: dict[Path, int] = {}
    long = []
    for path in modules().values():
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    crowded = [f"{f.relative_to(ROOT)}: {n} modules" for f, n in folders.items()
               if n > MAX_MODULES_PER_FOLDER]
    assert (sorted(crowded), sorted(long)) == ([], [])


def test_every_package_is_declared_for_installation() -> None:
    """A package missing from pyproject's list is missing from a wheel (an editable install hides it)."""
    import tomllib

    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert found - declared == set()


def class_def(path: Path, name: str) -> ast.ClassDef:
    (found,) = [n for n in ast.parse(path.read_text(encoding="utf-8")).body
                if isinstance(n, ast.ClassDef) and n.name == name]
    return found


def public(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}


def test_the_facade_is_one_class_of_the_applications_verbs() -> None:
    facade = class_def(ROOT / "edgeq" / "manager.py", "QueueManager")
    assert facade.bases == [], "no mixins: every verb of QueueManager is in edgeq/manager.py"
    verbs = public(facade)
    assert len(verbs) <= MAX_VERBS, f"{len(verbs)} public verbs on QueueManager, more than {MAX_VERBS}"
    exchange = public(class_def(ROOT / "edgeq" / "exchange" / "verbs.py", "Exchange"))
    assert exchange and verbs.isdisjoint(exchange), "a sync-only verb is on qm.exchange, not on the facade"
