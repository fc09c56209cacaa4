"""
The package's shape: imports only go down the layers (L{LAYERS}, in
tools/layout.py with the README's map they are written into), C{quicx status}
does not import the daemon, nothing imports the CLI, there are no import
cycles, the blocking client, the protocol and the status views load no
Twisted, the public API is importable from C{quicx} itself, and the README's
layout map lists every module with its docstring's first sentence.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import quicx
from tools import layout
from tools.layout import FORBIDDEN, LAYERS

PACKAGE = Path(quicx.__file__).parent

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
            # "from quicx.daemon import pmad" imports the module quicx.daemon.queue.pmad.
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


# -- the README's layout map: one row per module, its docstring's first sentence ----------------

ROOT = PACKAGE.parent


def test_the_readme_layout_map_is_the_modules_docstrings() -> None:
    """The map python -m tools.layout writes is the one the README shows."""
    assert layout.differences((ROOT / "README.md").read_text(), ROOT) == []


def test_every_layered_package_is_in_the_map() -> None:
    mapped = {layout.where(path, ROOT) for path in layout.sources(ROOT)}
    assert {layout.where(path, ROOT) for path in ROOT.glob("quicx/**/*.py")} <= mapped
    assert {f"`{package.replace('.', '/')}/`" for package in LAYERS} <= mapped


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small checkout: two packages, the plugin, and a README whose map is up to date."""
    for path, docstring in [
        ("quicx/__init__.py", "The root."),
        ("quicx/protocol/__init__.py", "The protocol."),
        ("quicx/protocol/wire.py", "The wire format: constants\nand functions.  More here."),
        ("quicx/cli/__init__.py", "The command."),
        ("twisted/plugins/quicx_plugin.py", "The plugin."),
    ]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(f'"""\n{docstring}\n"""\n\nX = 1\n')
    readme = f"# Quicx\n\n## Layout\n\n{layout.BEGIN}\n{layout.END}\n\nThe end.\n"
    (tmp_path / "README.md").write_text(layout.written(readme, tmp_path)[0])
    return tmp_path


def test_the_map_check_passes_an_up_to_date_map(tree: Path) -> None:
    readme = (tree / "README.md").read_text()
    assert layout.differences(readme, tree) == []
    assert "| `quicx/protocol/wire.py` | The wire format: constants and functions. |" in readme
    assert readme.endswith(f"{layout.END}\n\nThe end.\n")


def test_the_map_check_names_a_module_missing_from_the_map(tree: Path) -> None:
    (tree / "quicx/protocol/frames.py").write_text('"""Framing."""\n')
    assert layout.differences((tree / "README.md").read_text(), tree) == [
        "`quicx/protocol/frames.py` is missing from README.md's layout map",
        "run: python -m tools.layout",
    ]


def test_the_map_check_names_a_stale_row_and_a_gone_module(tree: Path) -> None:
    (tree / "quicx/protocol/wire.py").write_text('"""The wire format, renewed."""\n')
    (tree / "quicx/cli/__init__.py").unlink()
    assert layout.differences((tree / "README.md").read_text(), tree) == [
        "`quicx/protocol/wire.py`'s row is stale: README.md says"
        " 'The wire format: constants and functions.', its docstring 'The wire format, renewed.'",
        "`quicx/cli/` is in README.md's layout map but is not a module",
        "run: python -m tools.layout",
    ]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("X = 1\n", "has no docstring"),
        ('"""\nThe wire format:\n\n    a drawing\n"""\n', "does not open with a sentence"),
        (f'"""{"word " * 30}end."""\n', "first sentence is 154 characters"),
    ],
)
def test_the_map_check_names_a_module_without_a_summary(
    tree: Path, source: str, problem: str
) -> None:
    (tree / "quicx/protocol/wire.py").write_text(source)
    problems = layout.differences((tree / "README.md").read_text(), tree)
    assert len(problems) == 1
    assert problems[0].startswith("quicx/protocol/wire.py: ")
    assert problem in problems[0]


def test_the_map_check_finds_a_stale_layering_sentence(tree: Path) -> None:
    readme = (tree / "README.md").read_text().replace("Five layers", "Four layers")
    assert layout.differences(readme, tree) == [
        "README.md's layout part is out of order or its layering sentence is stale",
        "run: python -m tools.layout",
    ]


def test_the_map_needs_its_markers(tree: Path) -> None:
    readme = (tree / "README.md").read_text().replace(layout.END, "")
    assert layout.differences(readme, tree) == [
        f"README.md needs one {layout.BEGIN!r} and one {layout.END!r} line"
    ]
