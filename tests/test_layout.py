"""
The package's shape: imports only go down the layers, C{quicx status} does
not import the daemon, nothing imports the CLI, there are no import cycles,
the blocking client, the protocol and the status views load no Twisted, and
the public API is importable from C{quicx} itself.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import quicx

PACKAGE = Path(quicx.__file__).parent

LAYERS = {
    "quicx.protocol": 0,
    "quicx.documents": 0,
    "quicx.net": 1,
    "quicx.daemon": 2,
    "quicx.clients": 2,
    "quicx.report": 3,
    "quicx.status": 3,
    "quicx.cli": 4,
}
"""A module may import its own layer's package and lower layers only."""

FORBIDDEN = {
    # What C{quicx status} shows comes from the status documents (and the
    # pure functions over them, in quicx.documents), never from the daemon's
    # insides: a status that imports the daemon stops at the daemon's next
    # refactoring (and it loaded Twisted, through the settings).
    ("quicx.status", "quicx.daemon"),
}
"""(importer, imported) packages that may not import each other though their layers allow it."""

ROOT_NAMES = {"__version__", "version_line"}
"""What any module may import from the package root (which imports lazily)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def quicx_imports(path: Path) -> list[tuple[str, list[str]]]:
    """Every C{quicx} module C{path} imports (anywhere in it), with the names taken."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "quicx"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "quicx":
                continue
            names = [a.name for a in node.names]
            # "from quicx.daemon import pmad" imports the module quicx.daemon.pmad.
            where = PACKAGE.parent / node.module.replace(".", "/")
            submodules = [n for n in names if (where / f"{n}.py").exists() or (where / n).is_dir()]
            found += [(f"{node.module}.{n}", []) for n in submodules]
            rest = [n for n in names if n not in submodules]
            if rest:
                found.append((node.module, rest))
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> tuple[str, int] | None:
    for package, rank in LAYERS.items():
        if module == package or module.startswith(package + "."):
            return package, rank
    return None


def test_imports_only_go_down_the_layers() -> None:
    wrong = []
    for module, path in MODULES.items():
        mine = layer(module)
        for imported, names in quicx_imports(path):
            if imported == "quicx":
                if module != "quicx" and not set(names) <= ROOT_NAMES:
                    wrong.append(f"{module} imports {names} from the package root")
                continue
            theirs = layer(imported)
            assert theirs is not None, f"{imported} (imported by {module}) has no layer"
            if imported == "quicx.cli":
                wrong.append(f"{module} imports the CLI")
            elif mine is not None and theirs[0] != mine[0] and theirs[1] >= mine[1]:
                wrong.append(f"{module} (layer {mine[1]}) imports {imported} (layer {theirs[1]})")
            elif mine is not None and (mine[0], theirs[0]) in FORBIDDEN:
                wrong.append(f"{module} imports {imported}: {mine[0]} may not import {theirs[0]}")
    assert not wrong, "\n".join(wrong)


def test_there_are_no_import_cycles() -> None:
    graph = {
        module: {imported for imported, _ in quicx_imports(path) if imported in MODULES}
        for module, path in MODULES.items()
    }
    # The root's imports are lazy (a module __getattr__): they close no cycle.
    graph["quicx"] = set()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = [*path[path.index(module) :], module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


@pytest.mark.parametrize(
    "statement",
    [
        "import quicx",
        "import quicx.clients.blocking",
        "from quicx import QuicxClient, QuicxError",
        "import quicx.protocol.wire, quicx.protocol.frames, quicx.protocol.session",
        "import quicx.status.activity, quicx.status.cluster, quicx.status.watch",
    ],
)
def test_the_protocol_and_the_blocking_client_load_no_twisted(statement: str) -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", f"{statement}; import sys; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'twisted" not in loaded


def test_the_public_api_is_importable_from_quicx() -> None:
    assert set(quicx.__all__) == set(quicx._PUBLIC) | {"__version__", "version_line"}
    for name in quicx.__all__:
        assert getattr(quicx, name) is not None
    from quicx import QuicxClient, Worker, connect

    assert QuicxClient.__module__ == "quicx.clients.blocking"
    assert Worker.__module__ == "quicx.clients.worker"
    assert connect.__module__ == "quicx.clients.twisted_client"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        quicx.Nope  # noqa: B018


def test_every_package_is_shipped_by_a_regular_install() -> None:
    """setup.cfg lists packages by name: a new one left out works only from a checkout."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(Path(__file__).parent.parent / "setup.cfg")
    listed = set(setup["options"]["packages"].split())
    found = {module_name(init) for init in PACKAGE.rglob("__init__.py")}
    assert found - listed == set()
