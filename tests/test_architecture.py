"""The layers, read off the source: what each package imports when it is loaded, no import
cycles between modules, and no module outside a target's folder that tests a kind by name.

    schemas  <-  runtime  <-  compiler  <-  worker  <-  server
                 runtime  <-  client (the client loads kernels and talks HTTP, nothing more)
                 compiler <-  frontends (models to task sets; torch and onnx at call time)
                 frontends <- torch (`tunehub.torch`, a real folder of `tunehub/`: tuned kernels
                              inside PyTorch; nothing of the core loads it)

`targets/<kind>/` sits beside them: each facet imports the layer it serves, and the layers
reach a target only through the registry (`schemas.target.kinds`), at call time.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "schemas",
    "runtime",
    "compiler",
    "targets",
    "worker",
    "server",
    "client",
    "frontends",
    "migrations",
    "tunehub/torch",
)
# What each package may import when it is loaded (function-level imports are call time).
LOAD_TIME = {
    "schemas": {"schemas"},
    "runtime": {"schemas", "runtime"},
    "compiler": {"schemas", "runtime", "compiler"},
    "worker": {"schemas", "runtime", "compiler", "worker"},
    "server": {"schemas", "runtime", "compiler", "worker", "server", "migrations"},
    "client": {"schemas", "runtime", "client"},
    "frontends": {"schemas", "runtime", "compiler", "frontends"},
    "torch": {"schemas", "runtime", "compiler", "frontends", "torch"},
}
TARGET_KINDS = {"cpu", "cuda"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] == "tunehub":  # a folder of the package itself, not a link to one
        parts.pop(0)
    return ".".join(["tunehub", *parts])


@functools.cache
def modules() -> dict[str, ast.Module]:
    return {
        _module(path): ast.parse(path.read_text())
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _imported(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The tunehub modules an import statement loads (a package's `__init__` included)."""
    known = modules()
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    else:
        base = node.module or ""
        names = {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    found = set()
    for name in names:
        parts = name.split(".")
        found |= {".".join(parts[:n]) for n in range(2, len(parts) + 1)}
    return {name for name in found if name in known}


def _load_time_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            found += _load_time_imports(node.body) + _load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            found += _load_time_imports(node.body)
    return found


@functools.cache
def load_time_graph() -> dict[str, set[str]]:
    return {
        name: set().union(*map(_imported, _load_time_imports(tree.body))) - {name}
        for name, tree in modules().items()
    }


def _closure(start: str) -> set[str]:
    graph, seen, todo = load_time_graph(), set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph[name]
    return seen


@pytest.mark.parametrize("package", sorted(LOAD_TIME))
def test_each_layer_loads_only_the_layers_below_it(package: str) -> None:
    allowed = LOAD_TIME[package]
    wrong = {
        name: sorted(m for m in _closure(name) if m.split(".")[1] not in allowed)
        for name in modules()
        if name.split(".")[1] == package
    }
    assert not {name: found for name, found in wrong.items() if found}


def test_data_access_loads_nothing_of_the_compiler() -> None:
    """`server/db/` stores what its callers computed (a config's key is its space's, a
    workload's key its program's): the layer under the server's logic, not beside it."""
    wrong = {
        name: sorted(m for m in _closure(name) if m.startswith("tunehub.compiler"))
        for name in modules()
        if name.startswith("tunehub.server.db")
    }
    assert not {name: found for name, found in wrong.items() if found}


def test_the_service_reads_the_worker_registry_not_the_daemon() -> None:
    """The API and the tuner list workers and send measure jobs through `worker.registry` and
    `worker.measure_lock` (call-time imports count too), and `tunehub worker` becomes the
    daemon's own program: the daemon's loop and CLI are only for the processes that serve the
    queues."""
    importers = [
        name
        for name, tree in modules().items()
        if name.startswith(("tunehub.server.", "tunehub.client."))
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        and "tunehub.worker.daemon" in _imported(node)
    ]
    assert not importers


def test_frontends_load_torch_and_onnx_only_when_called() -> None:
    """The core package imports, and its tests pass, without either installed (`tunehub.torch`
    is the torch extra itself)."""
    heavy = ("torch", "onnx", "google")
    found = [
        f"{name}:{node.lineno}"
        for name, tree in modules().items()
        if not name.startswith("tunehub.torch")
        for node in _load_time_imports(tree.body)
        for imported in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        if imported.split(".")[0] in heavy
    ]
    assert not found


def test_the_core_package_imports_without_torch() -> None:
    """`import tunehub` and its layers load neither `tunehub.torch` nor torch."""
    import subprocess
    import sys

    layers = ", ".join(f"tunehub.{p}" for p in LOAD_TIME if p != "torch")
    code = f"import sys, tunehub, {layers}; print(sorted(m for m in sys.modules if 'torch' in m))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_no_two_modules_import_each_other() -> None:
    """Imports at call time count here too; those for type checking alone do not, nor a
    package's `__init__` loading its own modules."""
    graph: dict[str, set[str]] = {}
    for name, tree in modules().items():
        checking = [
            n
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        ]
        imports = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Import | ast.ImportFrom) and not any(n is c for c in checking)
        ]
        graph[name] = {m for node in imports for m in _imported(node)}
        graph[name] -= {name, *(p for p in graph[name] if name.startswith(p + "."))}
    cycles = _cycles(graph)
    assert not cycles, cycles


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_only_the_registry_and_the_targets_name_a_target_kind() -> None:
    """A comparison with, or a table keyed by, "cpu" or "cuda" outside `targets/` and
    `schemas/target.py` would be knowledge of a target that its folder should hold."""
    offenders = []
    for name, tree in modules().items():
        if name.startswith("tunehub.targets") or name == "tunehub.schemas.target":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
            elif isinstance(node, ast.Dict):
                values = [k for k in node.keys if k is not None]
            else:
                continue
            if any(isinstance(v, ast.Constant) and v.value in TARGET_KINDS for v in values):
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders
