"""pyspark is an optional extra ([spark]): the node imports and runs without it, `audit` says what is missing."""
from __future__ import annotations

import subprocess
import sys
import textwrap

# Runs in a fresh interpreter where `import pyspark` fails as if the extra were not installed.
_WITHOUT_PYSPARK = textwrap.dedent("""
    import importlib, pkgutil, sys

    class NoPyspark:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyspark", "py4j"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoPyspark())
    import certs, ii_api, interchange, jms_selectors, quadtree
    for package in (interchange, ii_api, certs, quadtree, jms_selectors):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith("__main__"):  # a __main__ module runs the command line
                importlib.import_module(info.name)
    importlib.import_module("spark.cli")
    importlib.import_module("spark.loggen")
    from interchange.app.cli import main
    assert main(["quadtree", "51.485992", "4.735311", "--zoom", "18"]) == 0
    status = main(["audit", "ingest", "--input", "x.jsonl", "--output", "out"])
    assert status == 2, status
    assert not [name for name in sys.modules if name.startswith(("pyspark", "py4j"))]
    print("node ok without pyspark")
""")


def test_node_imports_and_runs_without_pyspark() -> None:
    result = subprocess.run([sys.executable, "-c", _WITHOUT_PYSPARK], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "node ok without pyspark" in result.stdout
    assert "pyspark is not installed: install the node with its spark extra" in result.stderr
