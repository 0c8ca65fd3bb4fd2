"""The package's layers, as the README's architecture section draws them, checked on its imports.

Every ``import`` of an ipympi module anywhere in a module counts: inside functions, and
inside ``if TYPE_CHECKING:`` blocks too (an import that only the type checker follows
still ties two modules together). The rules:

* a module imports nothing of a layer above its own (``core`` imports nothing of ipympi's
  outside ``core``; ``mpi`` never imports ``notebook``; ...);
* no import cycle anywhere in the package, between modules of one layer included;
* ``core`` imports neither pyzmq nor threads, sockets or clocks: it is sans-I/O, and it
  imports in a Python without pyzmq.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ipympi"
MAGICS = ROOT / "magics"  # installed as ipympi.magics

# Lowest first. A module belongs to the first entry that is a prefix of its name.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("ipympi.core", "ipympi._version")),
    ("progress", ("ipympi.progress",)),
    ("mpi", ("ipympi.mpi.", "ipympi.mpi", "ipympi.MPI")),
    ("mpi4py", ("ipympi.mpi4py",)),
    ("launch", ("ipympi.launch", "ipympi.run")),
    ("teach", ("ipympi.teach",)),
    ("notebook", ("ipympi.notebook", "ipympi.kernel", "ipympi.magics")),
    ("top", ("ipympi.__main__", "ipympi")),
]
# What core must not import: it moves no byte, starts no thread, reads no clock.
SANS_IO_BANNED = {"zmq", "socket", "select", "selectors", "asyncio", "time", "subprocess"}
LOCKS_ONLY = {"Lock", "RLock"}  # what core may take of ``threading``: no threads, no waits


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer."""
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix.endswith("."):
                if module.startswith(prefix):
                    return index
            elif module == prefix or module.startswith(prefix + "."):
                return index
    raise AssertionError(f"{module} is in no layer")


def modules() -> dict[str, Path]:
    """Every module of the package, ``ipympi.magics`` included (the ``mpi4py`` name's
    alias folder left out: its modules only point at ipympi's)."""
    found = {}
    for folder, prefix in ((PACKAGE, ()), (MAGICS, ("ipympi", "magics"))):
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder.parent if not prefix else folder).with_suffix("").parts
            parts = (*prefix, *rel)
            if "site" in parts:
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The ipympi modules ``name`` imports, and the top-level names of the others."""
    tree = ast.parse(path.read_text())
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    ours: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "ipympi":
                others.add(source.split(".")[0])
                continue
            for alias in node.names:
                full = f"{source}.{alias.name}"
                targets.append(full if full in known else source)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ipympi":
                    targets.append(alias.name)
                else:
                    others.add(alias.name.split(".")[0])
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target != name:
                ours.add(target)
    return ours, others


KNOWN = modules()
GRAPH = {name: imports(name, path, KNOWN) for name, path in KNOWN.items()}

# Imports made for the type checker only that still close a circle, not yet removed:
# the mixins of ``MPI.Comm`` and ``MPI.Datatype`` (and the protocols describing them)
# name the handle classes they end up in, for the annotations of the public methods
# (``Split() -> Comm``), and the process state names ``Comm`` and the buffered-send
# pool. Each is left out of the graph below; the list may only shrink.
PENDING_TYPE_IMPORTS = {
    ("ipympi.mpi.attributes", "ipympi.mpi.datatype"),
    ("ipympi.mpi.commcreate", "ipympi.mpi.comm"),
    ("ipympi.mpi.commimpl", "ipympi.mpi.comm"),
    ("ipympi.mpi.datatype_derived", "ipympi.mpi.datatype"),
    ("ipympi.mpi.datatype_lookup", "ipympi.mpi.datatype"),
    ("ipympi.mpi.handles", "ipympi.mpi.comm"),
    ("ipympi.mpi.handles", "ipympi.mpi.datatype"),
    ("ipympi.mpi.intercomm", "ipympi.mpi.comm"),
    ("ipympi.mpi.process", "ipympi.mpi.bsend"),
    ("ipympi.mpi.process", "ipympi.mpi.comm"),
    ("ipympi.mpi.topology", "ipympi.mpi.neighbor"),
}


def test_every_module_is_in_a_layer() -> None:
    for name in KNOWN:
        layer_of(name)


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_no_module_imports_a_higher_layer(name: str) -> None:
    own = layer_of(name)
    above = sorted(t for t in GRAPH[name][0] if layer_of(t) > own)
    assert not above, f"{name} ({LAYERS[own][0]}) imports higher layers: {above}"


def test_core_is_sans_io() -> None:
    for name, path in KNOWN.items():
        if layer_of(name) != 0:
            continue
        banned = sorted(GRAPH[name][1] & SANS_IO_BANNED)
        assert not banned, f"{name} imports {banned}"
        used = {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "threading"
        }
        assert used <= LOCKS_ONLY, f"{name} uses threading.{sorted(used - LOCKS_ONLY)}"


def test_pending_type_imports_are_still_there() -> None:
    """Each allowance above names an import that exists: a removed one must leave the list."""
    gone = sorted(edge for edge in PENDING_TYPE_IMPORTS if edge[1] not in GRAPH[edge[0]][0])
    assert not gone, f"remove from PENDING_TYPE_IMPORTS: {gone}"


def test_no_import_cycle() -> None:
    graph = {
        name: {t for t in targets if (name, t) not in PENDING_TYPE_IMPORTS}
        for name, (targets, _) in GRAPH.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(KNOWN):
        if name not in index:
            visit(name)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_core_imports_without_pyzmq() -> None:
    """Every core module imports in a Python where importing zmq fails."""
    core = sorted(name for name in KNOWN if layer_of(name) == 0)
    code = "import sys; sys.modules['zmq'] = None\n" + "".join(f"import {m}\n" for m in core)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
