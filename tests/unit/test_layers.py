"""Imports run downwards only, through the layers of docs/architecture.md ("Layers").

Every module of our packages is read with :mod:`ast` (nothing is imported): each import statement,
at module level or inside a function, absolute or relative (``from . import x``, ``from ..app
import y``), and ``importlib.import_module("name")`` with a literal name, is mapped to the unit it
reaches (a top-level package, or a sub-package of ``interchange`` or ``ii_api``) and that unit's
rank. An import may reach its own unit or a unit of a lower rank; one that reaches up or sideways
fails the test, named by file, line and both modules. The sub-packages of ``ii_api`` are ranked
among themselves too (:data:`INNER_RANKS`): between two of them the inner ranks decide, towards
anything else the package's rank. A module whose unit has no rank fails it too (so every module of
``ii_api`` lives in one of its ranked sub-packages), and so does a top-level package setuptools
ships that the table does not list, so a new package cannot slip past.
A few imports the ranks allow are refused by name (:data:`FORBIDDEN`): the audit reads the message
profile from the ground layer, not through the broker's validation or TTL policy.
"""
from __future__ import annotations

import ast
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from interchange.testing.paths import REPO_ROOT

ROOT = REPO_ROOT

#: The namespace package whose sub-packages are units of their own; its ``__init__`` is rank 0.
NAMESPACE = "interchange"
#: A package whose sub-packages are units ranked among themselves (:data:`INNER_RANKS`).
LAYERED = "ii_api"
#: Packages whose own ``__init__`` is a unit that imports nothing; every other module is in a sub-package.
NAMESPACES = frozenset({NAMESPACE, LAYERED})

#: Unit -> rank (docs/architecture.md, "Layers").
RANKS: dict[str, int] = {
    "quadtree": 0, "jms_selectors": 0, NAMESPACE: 0,
    "interchange.ground": 1, "certs": 1,
    "interchange.broker": 2,
    "ii_api": 3, "spark": 3,
    "interchange.actor": 4,
    "interchange.bridges": 5, "interop_kit": 5,
    "interchange.app": 6,
    "interchange.__main__": 7, "interchange.testing": 7,
}
#: Sub-package of ``ii_api`` -> its rank inside the package (docs/architecture.md, "Control plane").
INNER_RANKS: dict[str, int] = {
    "ii_api.selectors": 0,
    "ii_api.wire": 1,
    "ii_api.decisions": 2, "ii_api.peers": 2,
    "ii_api.storage": 3, "ii_api.settings": 3,
    "ii_api.resources": 4,
    "ii_api.http": 5,
    "ii_api.node": 6,
}
RANKS.update(dict.fromkeys(INNER_RANKS, RANKS[LAYERED]))
PACKAGES = frozenset(unit.split(".")[0] for unit in RANKS)
#: Imports the ranks allow but the layer map does not: (importing unit, module) -> where to go instead.
#: The audit reads the message profile from the ground layer, never through the broker's readers of it.
FORBIDDEN: dict[tuple[str, str], str] = {
    ("spark", "interchange.broker.validation"): "interchange.ground.profile",
    ("spark", "interchange.broker.ttl_policy"): "interchange.ground.profile",
}


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str  #: the importing module
    target: str  #: the module (or package) it imports


def unit_of(module: str) -> str | None:
    """The ranked unit a module belongs to (None: no rank). ``interchange`` and ``ii_api`` themselves
    are only their ``__init__``; a module directly under them belongs to no unit."""
    parts = module.split(".")
    for size in (2, 1):
        name = ".".join(parts[:size])
        if name in RANKS and (name not in NAMESPACES or module == name):
            return name
    return None


def below(target: str, unit: str) -> bool:
    """Whether unit ``unit`` may import unit ``target`` (a different one): it ranks lower, by the
    inner ranks between two sub-packages of ``ii_api``, else by the package ranks."""
    if target in INNER_RANKS and unit in INNER_RANKS:
        return INNER_RANKS[target] < INNER_RANKS[unit]
    return RANKS[target] < RANKS[unit]


def rank_name(unit: str) -> str:
    return f"rank {RANKS[unit]}.{INNER_RANKS[unit]}" if unit in INNER_RANKS else f"rank {RANKS[unit]}"


def module_files(root: Path, packages: frozenset[str] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name."""
    modules = {}
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _base(module: str, path: Path, level: int, name: str | None) -> str:
    """The absolute module a (possibly relative) ``from`` statement names."""
    if not level:
        return name or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if level - 1 >= len(package):
        raise ValueError(f"{path}: relative import beyond the top-level package")
    parts = package[:len(package) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def _literal_import(node: ast.Call) -> str | None:
    """The name in ``importlib.import_module("x")`` / ``__import__("x")``, when it is a literal."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if called in ("import_module", "__import__") and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
            return first.value
    return None


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imports_of(module: str, path: Path, modules: dict[str, Path],
               tree: Callable[[Path], ast.Module] = parse) -> Iterator[Import]:
    """Every import of ours in one module, wherever it is in the file."""
    for node in ast.walk(tree(path)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, path, node.level, node.module)
            # ``from pkg import name``: the sub-module when ``name`` is one, else ``pkg`` itself
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        elif isinstance(node, ast.Call) and (literal := _literal_import(node)) is not None:
            targets = [literal]
        for target in dict.fromkeys(targets):
            if target.split(".")[0] in PACKAGES:
                yield Import(path, node.lineno, module, target)


def violations(root: Path, packages: frozenset[str] = PACKAGES, tree: Callable[[Path], ast.Module] = parse) -> list[str]:
    """Every import that does not run downwards, and every module without a rank, as one line each."""
    found = []
    modules = module_files(root, packages)
    for module, path in modules.items():
        unit = unit_of(module)
        where = path.relative_to(root)
        if unit is None:
            found.append(f"{where}: module {module} belongs to no ranked unit (add it to RANKS and the layer map)")
            continue
        for imp in imports_of(module, path, modules, tree):
            target_unit = unit_of(imp.target)
            if target_unit is None:
                found.append(f"{where}:{imp.line}: {module} imports {imp.target}, which belongs to no ranked unit")
            elif target_unit != unit and not below(target_unit, unit):
                way = "sideways" if not below(unit, target_unit) else "upwards"
                found.append(f"{where}:{imp.line}: {module} ({rank_name(unit)}) imports {imp.target} "
                             f"({rank_name(target_unit)}) {way}")
            else:
                found += [f"{where}:{imp.line}: {module} imports {imp.target}: read {instead} instead"
                          for (importer, banned), instead in FORBIDDEN.items()
                          if unit == importer and (imp.target == banned or imp.target.startswith(banned + "."))]
    return found


def test_imports_run_downwards_only(source_tree: Callable[[Path], ast.Module]) -> None:
    found = violations(ROOT, tree=source_tree)
    assert not found, "imports that do not run downwards (docs/architecture.md, Layers):\n" + "\n".join(found)


def test_the_walk_sees_the_whole_library(source_tree: Callable[[Path], ast.Module]) -> None:
    """A check on the walk itself: it reads hundreds of imports, the hidden kinds included."""
    modules = module_files(ROOT)
    imports = [imp for module, path in modules.items() for imp in imports_of(module, path, modules, source_tree)]
    assert len(modules) > 150 and len(imports) > 400
    seen = {(imp.module, imp.target) for imp in imports}
    assert ("interchange.app.node", "interchange.bridges.if2.bridge") in seen  # inside a function (pamqp is an extra)
    assert ("interchange.broker.metrics", "interchange.broker.router") in seen  # under TYPE_CHECKING
    assert ("spark.cli", "spark.session") in seen  # importlib.import_module("spark.session")
    assert ("interchange.app.cli", "interchange.app.selfnode") in seen  # from interchange.app import selfnode
    assert ("interchange.app.cli", "interchange.actor.cli") in seen  # the actors' toolkit, under the shell
    assert ("interop_kit.demo_data", "interchange.actor") in seen  # the kit acts through it


def top_level_packages(root: Path) -> set[str]:
    return {path.parent.name for path in root.glob("*/__init__.py")}


def test_every_shipped_package_has_a_rank() -> None:
    """The top-level packages on disk and those pyproject ships are exactly the ranked ones."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = {pattern.rstrip("*") for pattern in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert top_level_packages(ROOT) == set(PACKAGES) == shipped


@pytest.mark.parametrize("package", sorted(NAMESPACES))
def test_the_namespace_packages_import_nothing(package: str) -> None:
    tree = ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


#: A small tree that obeys the layers; each case below adds one file that breaks them.
CLEAN = {
    "interchange/__init__.py": "",
    "interchange/ground/__init__.py": "",
    "interchange/ground/clock.py": "import time\n",
    "interchange/broker/__init__.py": "",
    "interchange/broker/router.py": "from interchange.ground import clock\nfrom . import engine\n",
    "interchange/broker/engine.py": "from .router import x\n",
    "interchange/app/__init__.py": "",
    "interchange/app/node.py": "from interchange.broker import router\nimport ii_api.node.service\n",
    "ii_api/__init__.py": "",
    "ii_api/wire/__init__.py": "",
    "ii_api/wire/models.py": "from interchange.broker.validation import x\n",
    "ii_api/resources/__init__.py": "",
    "ii_api/resources/incoming.py": "from ii_api.wire.models import x\nfrom . import doors\n",
    "ii_api/resources/doors.py": "from ..wire import models\n",
    "ii_api/node/__init__.py": "",
    "ii_api/node/service.py": "from ii_api.resources import incoming\nfrom interchange.broker.router import x\n",
    "spark/__init__.py": "",
    "spark/job.py": "import importlib\nimportlib.import_module('spark.other')\n",
    "interchange/actor/__init__.py": "",
    "interchange/actor/client.py": "from ii_api.node.service import x\nfrom interchange.broker.router import y\n",
    "interchange/bridges/__init__.py": "",
    "interchange/bridges/tlex/bridge.py": "from interchange.actor.client import x\n",
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    _plant(tmp_path, CLEAN)
    assert violations(tmp_path) == []


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("interchange/ground/lazy.py", "def f():\n    from interchange.app.node import start\n",
     "interchange/ground/lazy.py:2: interchange.ground.lazy (rank 1) imports interchange.app.node (rank 6) upwards"),
    ("interchange/broker/up.py", "from ..app import node\n",
     "interchange/broker/up.py:1: interchange.broker.up (rank 2) imports interchange.app.node (rank 6) upwards"),
    ("interchange/broker/pkg/__init__.py", "from ... import app\n",
     "interchange/broker/pkg/__init__.py:1: interchange.broker.pkg (rank 2) imports interchange.app (rank 6) upwards"),
    ("ii_api/node/audit.py", "import spark.job\n",
     "ii_api/node/audit.py:1: ii_api.node.audit (rank 3.6) imports spark.job (rank 3) sideways"),
    ("spark/uses_ii.py", "from ii_api.wire import models\n",
     "spark/uses_ii.py:1: spark.uses_ii (rank 3) imports ii_api.wire.models (rank 3.1) sideways"),
    ("ii_api/node/named.py", "import importlib\nimportlib.import_module('interchange.app.node')\n",
     "ii_api/node/named.py:2: ii_api.node.named (rank 3.6) imports interchange.app.node (rank 6) upwards"),
    ("ii_api/wire/errors.py", "def f():\n    from ii_api.resources.doors import x\n",
     "ii_api/wire/errors.py:2: ii_api.wire.errors (rank 3.1) imports ii_api.resources.doors (rank 3.4) upwards"),
    ("ii_api/resources/up.py", "from ..node import service\n",
     "ii_api/resources/up.py:1: ii_api.resources.up (rank 3.4) imports ii_api.node.service (rank 3.6) upwards"),
    ("ii_api/decisions/side.py", "import ii_api.peers.client\n",
     "ii_api/decisions/side.py:1: ii_api.decisions.side (rank 3.2) imports ii_api.peers.client (rank 3.2) sideways"),
    ("ii_api/flat.py", "",
     "ii_api/flat.py: module ii_api.flat belongs to no ranked unit (add it to RANKS and the layer map)"),
    ("interchange/bridges/uses_flat.py", "import ii_api.flat\n",
     "interchange/bridges/uses_flat.py:1: interchange.bridges.uses_flat imports ii_api.flat, which belongs to no ranked unit"),
    ("interchange/__init__.py", "from interchange.ground import clock\n",
     "interchange/__init__.py:1: interchange (rank 0) imports interchange.ground.clock (rank 1) upwards"),
    ("interchange/actor/bridged.py", "from interchange.bridges.if2 import bridge\n",
     "interchange/actor/bridged.py:1: interchange.actor.bridged (rank 4) imports interchange.bridges.if2 (rank 5) upwards"),
    ("interchange/actor/shell.py", "def f():\n    import interchange.app.cli\n",
     "interchange/actor/shell.py:2: interchange.actor.shell (rank 4) imports interchange.app.cli (rank 6) upwards"),
    ("interchange/extra.py", "",
     "interchange/extra.py: module interchange.extra belongs to no ranked unit (add it to RANKS and the layer map)"),
    ("interchange/shell/__init__.py", "",
     "interchange/shell/__init__.py: module interchange.shell belongs to no ranked unit (add it to RANKS and the layer map)"),
    ("spark/uses_new.py", "import interchange.shell\n",
     "spark/uses_new.py:1: spark.uses_new imports interchange.shell, which belongs to no ranked unit"),
    ("spark/profile_user.py", "from interchange.broker.validation import STANDARD_PROPERTIES\n",
     "spark/profile_user.py:1: spark.profile_user imports interchange.broker.validation: "
     "read interchange.ground.profile instead"),
    ("spark/ttl_user.py", "def f():\n    import interchange.broker.ttl_policy\n",
     "spark/ttl_user.py:2: spark.ttl_user imports interchange.broker.ttl_policy: read interchange.ground.profile instead"),
])
def test_a_planted_bad_import_is_named(tmp_path: Path, name: str, text: str, expected: str) -> None:
    _plant(tmp_path, {**CLEAN, name: text})
    assert violations(tmp_path) == [expected]


def test_a_planted_top_level_package_is_seen(tmp_path: Path) -> None:
    _plant(tmp_path, {**CLEAN, "newpkg/__init__.py": ""})
    assert top_level_packages(tmp_path) - set(PACKAGES) == {"newpkg"}
