"""Classes under ~30 methods, functions under ~60 lines (the house style), held in library code.

Every module of the shipped packages (pyproject's ``packages.find``: ``interchange``, ``ii_api``,
``spark``, ``interop_kit``, ``certs``, ``jms_selectors``, ``quadtree``) is read with :mod:`ast`
(nothing is imported). A class with more than :data:`MAX_METHODS` methods (functions defined in
its body: properties, static and class methods included) fails the test, and so does a function
or method, nested ones too, longer than :data:`MAX_LINES` lines (from its ``def`` to its last line:
docstring, comments and blank lines included, decorators not), each named by file, line and
qualified name. Tests, benchmarks and scripts are not library code.
"""
from __future__ import annotations

import ast
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from interchange.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
MAX_METHODS = 30
MAX_LINES = 60


def library_packages(root: Path) -> list[str]:
    """The top-level packages setuptools ships (pyproject's ``include`` patterns, ``x*`` -> ``x``)."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return sorted(pattern.rstrip("*") for pattern in config["tool"]["setuptools"]["packages"]["find"]["include"])


def _definitions(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every class and function under ``node``, at any depth (under
    if/try/with blocks and inside other functions too)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _definitions(child, f"{name}.")
        else:
            yield from _definitions(child, prefix)


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def oversized(root: Path, packages: list[str], source_tree: Callable[[Path], ast.Module] = parse) -> list[str]:
    """One line per class over :data:`MAX_METHODS` methods or function over :data:`MAX_LINES` lines."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = source_tree(path)
            where = path.relative_to(root)
            for name, node in _definitions(tree, ""):
                if isinstance(node, ast.ClassDef):
                    methods = sum(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)
                    if methods > MAX_METHODS:
                        found.append(f"{where}:{node.lineno}: class {name} has {methods} methods "
                                     f"(at most {MAX_METHODS})")
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > MAX_LINES:
                        found.append(f"{where}:{node.lineno}: function {name} is {lines} lines "
                                     f"(at most {MAX_LINES})")
    return found


def test_library_classes_and_functions_are_small(source_tree: Callable[[Path], ast.Module]) -> None:
    found = oversized(ROOT, library_packages(ROOT), source_tree)
    assert not found, "too large (split along a real seam, docs/architecture.md):\n" + "\n".join(found)


def test_the_walk_sees_the_library(source_tree: Callable[[Path], ast.Module]) -> None:
    """A check on the walk itself: every shipped package, classes and functions at every depth."""
    packages = library_packages(ROOT)
    assert {"interchange", "ii_api", "spark", "interop_kit", "certs", "jms_selectors", "quadtree"} <= set(packages)
    names = {name for package in packages for path in (ROOT / package).rglob("*.py")
             for name, _ in _definitions(source_tree(path), "")}
    assert len(names) > 2000
    assert "ConnectionEngine._process" in names  # a method
    assert "ActorCapabilities.add_capabilities.add_all" in names  # a function inside a method


def _class(methods: int) -> str:
    return "class Big:\n" + "".join(f"    def m{i}(self):\n        pass\n" for i in range(methods))


def _function(lines: int, indent: str = "") -> str:
    """A function of exactly ``lines`` lines from its ``def``."""
    return f"{indent}def long():\n" + f"{indent}    x = 1\n" * (lines - 2) + f"{indent}    return x\n"


@pytest.mark.parametrize(("text", "expected"), [
    (_class(MAX_METHODS), []),
    (_class(MAX_METHODS + 1), [f"pkg/mod.py:1: class Big has {MAX_METHODS + 1} methods (at most {MAX_METHODS})"]),
    ("@staticmethod\n" + _function(MAX_LINES), []),
    (_function(MAX_LINES + 1), [f"pkg/mod.py:1: function long is {MAX_LINES + 1} lines (at most {MAX_LINES})"]),
    ("class Host:\n" + _function(MAX_LINES + 5, "    "),
     [f"pkg/mod.py:2: function Host.long is {MAX_LINES + 5} lines (at most {MAX_LINES})"]),
    ("import sys\nif sys.version_info >= (3,):\n" + _function(MAX_LINES + 1, "    "),
     [f"pkg/mod.py:3: function long is {MAX_LINES + 1} lines (at most {MAX_LINES})"]),
    ("try:\n    import fast\nexcept ImportError:\n" + _function(MAX_LINES + 1, "    "),
     [f"pkg/mod.py:4: function long is {MAX_LINES + 1} lines (at most {MAX_LINES})"]),
    ("def outer():\n" + _function(MAX_LINES + 1, "    "),
     [f"pkg/mod.py:1: function outer is {MAX_LINES + 2} lines (at most {MAX_LINES})",
      f"pkg/mod.py:2: function outer.long is {MAX_LINES + 1} lines (at most {MAX_LINES})"]),
])
def test_a_planted_oversize_is_named(tmp_path: Path, text: str, expected: list[str]) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(text, encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_big.py").write_text(_class(MAX_METHODS + 5), encoding="utf-8")  # not library code
    assert oversized(tmp_path, ["pkg"]) == expected
