"""
The README's layout map, written from the modules' docstrings.

C{python -m tools.layout} rewrites the part of README.md between the layout
markers: the layering sentence, from L{LAYERS} and L{FORBIDDEN} (which
tests/test_layout.py enforces), and a table with one row for each module of
C{quicx} and C{twisted/plugins}, package by package in layer order, each
saying its docstring's first sentence.  C{python -m tools.layout --check}
writes nothing and names each row that is missing or stale (tests/test_layout.py
runs the same check).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BEGIN = "<!-- layout: begin (python -m tools.layout writes this part) -->"
END = "<!-- layout: end -->"

LAYERS = {
    "quicx.protocol": 0,
    "quicx.documents": 0,
    "quicx.model": 0,
    "quicx.net": 1,
    "quicx.daemon": 2,
    "quicx.clients": 2,
    "quicx.aio": 3,  # built on quicx.clients' sans-I/O modules
    "quicx.report": 3,
    "quicx.status": 3,
    "quicx.contrib": 3,
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

LONGEST = 120
"""The longest summary a row may show, in characters of the README's text."""

NUMBERS = ["No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine"]


def sources(root: Path) -> list[Path]:
    """Every module the map lists: the root, each layer's package in layer order, the plugin."""
    packages = [name.split(".")[-1] for name in sorted(LAYERS, key=LAYERS.__getitem__)]
    found = [root / "quicx" / "__init__.py"]
    for package in packages:
        modules = (root / "quicx" / package).rglob("*.py")
        # A package's own row first, then its modules and subpackages by name.
        found += sorted(
            modules, key=lambda path: (*path.parent.parts, path.name.replace("__init__.py", ""))
        )
    unlayered = set((root / "quicx").rglob("*.py")) - set(found)
    found += sorted(unlayered)  # a package with no layer is listed (test_layout fails it)
    return found + sorted((root / "twisted" / "plugins").glob("*.py"))


def markdown(epytext: str) -> str:
    """Epytext's C{code} and L{link} as Markdown code; a pipe escaped for a table cell."""
    return re.sub(r"[CLIB]\{([^{}]*)\}", r"`\1`", epytext).replace("|", "\\|")


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, as a table cell; ValueError when it has none."""
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    if not docstring:
        raise ValueError("has no docstring")
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    sentence = re.match(r"(.*?[.?!])(\s|$)", paragraph)
    if sentence is None:
        raise ValueError(f"its docstring does not open with a sentence: {paragraph[:60]!r}")
    text = markdown(sentence.group(1))
    if len(text) > LONGEST:
        raise ValueError(
            f"its docstring's first sentence is {len(text)} characters (at most {LONGEST})"
        )
    return text


def where(path: Path, root: Path) -> str:
    relative = path.relative_to(root)
    return f"`{relative.parent}/`" if path.name == "__init__.py" else f"`{relative}`"


def rows(root: Path) -> tuple[dict[str, str], list[str]]:
    """Each module's row by its where cell, and the problems of modules with no summary."""
    found: dict[str, str] = {}
    problems = []
    for path in sources(root):
        try:
            found[where(path, root)] = summary(path)
        except ValueError as error:
            problems.append(f"{path.relative_to(root)}: {error}")
    return found, problems


def layering() -> str:
    """The sentence above the table: the layers, bottom up, and the rules between them."""
    ranks = sorted(set(LAYERS.values()))
    names = [
        " and ".join(f"`{name.split('.')[-1]}`" for name, rank in LAYERS.items() if rank == r)
        for r in ranks
    ]
    forbidden = "".join(
        f", `{a.split('.')[-1]}` never imports `{b.split('.')[-1]}`" for a, b in sorted(FORBIDDEN)
    )
    return "\n".join(
        [
            f"{NUMBERS[len(ranks)]} layers; imports only go down"
            " (`tests/test_layout.py` checks it,",
            f"and that there are no cycles): {' <- '.join(names)}.",
            f"Packages of one layer never import each other{forbidden}, and nothing",
            "imports `cli`.  Each row is its module's docstring's first sentence.",
        ]
    )


def section(found: dict[str, str]) -> str:
    table = ["| where | concept |", "|---|---|"]
    table += [f"| {cell} | {text} |" for cell, text in found.items()]
    return "\n".join([BEGIN, "", layering(), "", *table, "", END])


def written(readme: str, root: Path) -> tuple[str, list[str]]:
    """The README with its layout part as the modules say, and the problems that prevent it."""
    found, problems = rows(root)
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        return readme, [*problems, f"README.md needs one {BEGIN!r} and one {END!r} line"]
    before, rest = readme.split(BEGIN)
    _, after = rest.split(END)
    return before + section(found) + after, problems


def differences(readme: str, root: Path) -> list[str]:
    """What in the README's layout part differs from what the modules say, naming each module."""
    expected, problems = written(readme, root)
    if problems or expected == readme:
        return problems
    shown = dict(
        re.findall(r"^\| (`[^`]+`) \| (.*) \|$", readme.split(BEGIN)[1].split(END)[0], re.M)
    )
    found, _ = rows(root)
    for cell, text in found.items():
        if cell not in shown:
            problems.append(f"{cell} is missing from README.md's layout map")
        elif shown[cell] != text:
            problems.append(
                f"{cell}'s row is stale: README.md says {shown[cell]!r}, its docstring {text!r}"
            )
    problems += [
        f"{cell} is in README.md's layout map but is not a module"
        for cell in shown.keys() - found.keys()
    ]
    if not problems:
        problems.append("README.md's layout part is out of order or its layering sentence is stale")
    return [*problems, "run: python -m tools.layout"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.layout", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; list what is stale")
    arguments = parser.parse_args(argv)
    readme = ROOT / "README.md"
    text = readme.read_text()
    problems = differences(text, ROOT) if arguments.check else written(text, ROOT)[1]
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems and not arguments.check:
        readme.write_text(written(text, ROOT)[0])
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
