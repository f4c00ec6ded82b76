"""Where the repository's own files are, for tests and harnesses: the checkout that holds this package
(the directory with ``pyproject.toml``), never anything beside it."""
from __future__ import annotations

from pathlib import Path


def _repository_root() -> Path:
    here = Path(__file__).resolve()
    return next(p for p in here.parents if (p / "pyproject.toml").is_file())


#: The repository's root directory (README.md, pyproject.toml, benchmarks/, docs/ ...).
REPO_ROOT = _repository_root()
