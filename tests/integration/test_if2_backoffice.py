"""The IF2 counterpart itself (``tests/integration/if2_backoffice``): it shares no code with the project, and its
routing keys are the spec's (IF2 6.4's Rotterdam filter, and the interchange's quadtree on the
same points: two implementations of appendix A / 7.3.4 that must agree)."""
from __future__ import annotations

import ast
import random
import sys
from pathlib import Path

import pytest

import quadtree
from if2_backoffice import DEAD_LETTER_EXCHANGE, EXCHANGES, definitions, quadtree_path, routing_key

BACKOFFICE_DIR = Path(__file__).resolve().parent / "if2_backoffice"


def test_the_backoffice_shares_no_code_with_the_project() -> None:
    """Its modules import the standard library, pika and each other only (not pamqp, the codec of the bridge's client)."""
    allowed = set(sys.stdlib_module_names) | {"pika", "if2_backoffice"}
    imported = set()
    for path in BACKOFFICE_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: relative import"
                imported.add((node.module or "").split(".")[0])
    assert imported - allowed == set()
    assert "pika" in imported


def test_rotterdam_at_zoom_9_is_the_spec_example() -> None:
    """IF2 6.4: 'DENM.1_2_1.RWS.*.1.2.0.2.0.2.1.1.2.#', the quadtree path at zoom level 9 of the Rotterdam area."""
    assert quadtree_path(51.9225, 4.47917, 9) == "120202112"
    key = routing_key("DENM", "1.2.1", "RWS", "3", 51.9225, 4.47917)
    assert key.startswith("DENM.1_2_1.RWS.3.1.2.0.2.0.2.1.1.2.") and len(key.split(".")) == 4 + 18


def test_the_backoffice_and_the_interchange_agree_on_tiles() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        lat, lon = rng.uniform(-85.0, 85.0), rng.uniform(-180.0, 180.0)
        assert quadtree_path(lat, lon) == quadtree.from_latlon(lat, lon, 18), (lat, lon)


def test_a_word_with_a_period_is_refused() -> None:
    with pytest.raises(ValueError, match="without '.'"):
        routing_key("DENM", "1.2.1", "R.WS", "3", 51.9, 4.4)


def test_the_operator_definitions() -> None:
    """7.2: a vhost, users with every right on it, a policy on the server-named queues, Table 2's exchanges;
    the dead-letter exchange only when asked for."""
    full = definitions("test", ["a", "b"])
    assert [e["name"] for e in full["exchanges"] if e["type"] == "topic"] == list(EXCHANGES)
    assert all(e["durable"] and not e["auto_delete"] for e in full["exchanges"])
    assert full["policies"][0]["definition"]["dead-letter-exchange"] == DEAD_LETTER_EXCHANGE
    bare = definitions("test", ["a"], dead_letters=False)
    assert "dead-letter-exchange" not in bare["policies"][0]["definition"] and not bare["queues"]
