"""
The sizes issue 31 set, kept: in C{quicx/} and C{tools/}, no module over
900 lines, no class over 600, no function (or method) over 80, outside
tables.

A table is named in L{TABLES}, and must be declarations only (a module-level
assignment, or a class whose body is assignments and docstrings): its lines
count neither as a class nor towards its module.  L{ALLOWED} lists today's
offenders, each being split by its own step; an entry that is no longer
over its limit fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from attrs import frozen

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ("quicx", "tools")
LIMITS = {"module": 900, "class": 600, "function": 80}

TABLES: dict[str, str] = {}
"""
C{path:name} of each table (a module-level assignment or a class of
declarations only), and what it declares.  Empty today.
"""

ALLOWED: dict[str, str] = {}
"""C{path} (a module) or C{path:qualified.name} of each offender let through, and why."""


@frozen
class Size:
    """One module, class or function: where, what, how many lines."""

    name: str  # path, or path:qualified.name
    kind: str  # "module", "class" or "function"
    lines: int

    @property
    def over(self) -> bool:
        return self.lines > LIMITS[self.kind]

    def __str__(self) -> str:
        return f"{self.name}: {self.kind} of {self.lines} lines (limit {LIMITS[self.kind]})"


def is_table(node: ast.stmt) -> bool:
    """Whether C{node} is declarations only: an assignment, or a class of them."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return True
    return isinstance(node, ast.ClassDef) and all(
        isinstance(item, (ast.Assign, ast.AnnAssign, ast.Pass))
        or (isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant))
        for item in node.body
    )


def declared(node: ast.stmt) -> str | None:
    """The name C{node} declares: a class's, a function's, a simple assignment's."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name
    target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
    return target.id if isinstance(target, ast.Name) else None


def length(node: ast.stmt) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def sizes(path: str, source: str, tables: dict[str, str]) -> Iterator[Size]:
    """
    The sizes of the module at C{path} (its text C{source}), of each of its
    classes and functions (nested ones too, by qualified name), its tables
    (C{path:name} in C{tables}) left out.
    """
    tree = ast.parse(source)
    table_lines = 0

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[Size]:
        nonlocal table_lines
        for node in body:
            name = declared(node)
            qualified = f"{prefix}{name}"
            if name is not None and f"{path}:{qualified}" in tables:
                table_lines += length(node)
                continue
            if isinstance(node, ast.ClassDef):
                yield Size(f"{path}:{qualified}", "class", length(node))
                yield from walk(node.body, f"{qualified}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield Size(f"{path}:{qualified}", "function", length(node))
                yield from walk(node.body, f"{qualified}.")
            else:
                for child in ast.iter_child_nodes(node):  # functions under if, try, with...
                    if isinstance(child, ast.stmt):
                        yield from walk([child], prefix)

    yield from walk(tree.body, "")
    yield Size(path, "module", source.count("\n") - table_lines)


def measured() -> list[Size]:
    found: list[Size] = []
    for top in MEASURED:
        for file in sorted((ROOT / top).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            found += sizes(path, file.read_text(), TABLES)
    return found


def test_no_module_class_or_function_is_over_its_limit() -> None:
    offenders = [str(size) for size in measured() if size.over and size.name not in ALLOWED]
    assert not offenders, "split by meaning (one job each):\n" + "\n".join(offenders)


def test_each_allowed_offender_is_still_over_its_limit() -> None:
    over = {size.name for size in measured() if size.over}
    shrunk = sorted(set(ALLOWED) - over)
    assert not shrunk, "now within the limits (or gone): remove from ALLOWED: " + ", ".join(shrunk)


def test_each_table_is_declarations_only() -> None:
    for name in TABLES:
        path, _, qualified = name.partition(":")
        body = ast.parse((ROOT / path).read_text()).body
        for part in qualified.split("."):
            node = next(node for node in body if declared(node) == part)
            body = getattr(node, "body", [])
        assert is_table(node), f"{name}: a table holds declarations only"


SAMPLE = """\
def short():
{short}
class Holder:
    def long(self):
{long}
if True:
    def hidden():
{long}
TABLE = (
{rows}
)
class Declarations:
    a = 1
{fields}
"""


def test_the_measure_finds_what_is_over_and_leaves_tables_out() -> None:
    """The checker itself: nested and conditional functions are measured; tables are not."""
    source = SAMPLE.format(
        short="    x = 1\n" * 79,
        long="        x = 1\n" * 80,
        rows="    1,\n" * 700,
        fields="    b = 2\n" * 700,
    )
    tables = {"m.py:TABLE": "rows", "m.py:Declarations": "fields"}
    found = {size.name: size for size in sizes("m.py", source, tables)}
    assert not found["m.py:short"].over
    assert found["m.py:Holder.long"].over and found["m.py:Holder.long"].lines == 81
    assert found["m.py:hidden"].over
    assert "m.py:Declarations" not in found and "m.py:TABLE" not in found
    assert not found["m.py"].over  # 1,600 lines of tables left out
    everything = {size.name: size for size in sizes("m.py", source, {})}
    assert everything["m.py:Declarations"].over and everything["m.py"].over
    module = ast.parse(source).body
    assert is_table(module[-1]) and not is_table(module[1])
