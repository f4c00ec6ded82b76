"""The federation view on the admin endpoint (``GET /federation``): two federated nodes, the page
loaded in headless chromium (Debian's) from the live endpoint: what it shows, that it runs and
fetches nothing, that hostile names (a neighbour's, a selector's) stay text, and that a reload shows
the state now. The renderer's escaping is also checked without a browser, with a mutant that
drops it."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest

from certs import TestPki
from ii_api.peers.discovery import Neighbour
from interchange.app import federation_view
from interchange.app.config import AdminConfig, NodeConfig
from interchange.app.federation_view import (
    BridgeLink,
    DeliveryRow,
    FederationSnapshot,
    Link,
    NeighbourRow,
    SubscriptionRow,
    render,
)
from interchange.ground.ports import free_port
from interchange.testing import browser_harness
from interchange.testing.ii_harness import DOMAIN, A, B, wait_for
from interchange.testing.monitoring_harness import Pair, federate, start_pair

HOSTILE = "<img src=x onerror=\"document.title=1\"><script>document.title=2</script>"  # no ': a selector literal
HOSTILE_SELECTOR = f"messageType = 'DENM' AND publisherId <> '{HOSTILE}'"
HOSTILE_NEIGHBOUR = "evil<b>bold</b>.interchange.test"
PROBE = """({text: document.body.innerText, scripts: document.querySelectorAll('script').length,
  injected: document.querySelectorAll('img, b, iframe, object').length,
  headings: [...document.querySelectorAll('h2')].map(h => h.textContent)})"""


def with_admin(config: NodeConfig) -> NodeConfig:
    return config.model_copy(update={"admin": AdminConfig(host="127.0.0.1", port=0)})


@pytest.fixture
async def pair(pki: TestPki, tmp_path: Path) -> AsyncIterator[Pair]:
    unreachable = Neighbour(HOSTILE_NEIGHBOUR, "127.0.0.1", free_port(), DOMAIN)  # nothing listens there
    made = await start_pair(pki, tmp_path, A, B, "actor-a", adapt_a=with_admin, adapt_b=with_admin,
                            extra_neighbours=(unreachable,))
    try:
        yield made
    finally:
        await made.close()


async def fetch(url: str) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, dict(response.headers), await response.text()


async def test_the_federation_view_in_a_browser(pair: Pair, tmp_path: Path) -> None:
    await federate(pair, HOSTILE_SELECTOR)
    ii_b = pair.b.ii
    assert ii_b is not None
    await wait_for(lambda: (p := ii_b.pusher_state(HOSTILE_NEIGHBOUR)) is not None and p.last_error is not None,
                   "the push to the unreachable neighbour to fail")
    url_b = f"http://127.0.0.1:{pair.b.admin_port}/federation"
    status, headers, _ = await fetch(url_b)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "script-src" not in headers["Content-Security-Policy"] and "default-src 'none'" in headers[
        "Content-Security-Policy"]

    loaded = await browser_harness.load(url_b, probe=PROBE)
    (tmp_path / "federation-b.png").write_bytes(loaded.screenshot)
    assert loaded.errors == [] and loaded.requests_besides(url_b) == []
    assert loaded.title == f"Federation of {B}"  # the hostile markup did not run
    seen = loaded.probed
    assert seen["scripts"] == 0 and seen["injected"] == 0
    assert seen["headings"] == ["Neighbours", "Our subscriptions at neighbours", "Neighbours' subscriptions here",
                                "Local actors' deliveries and subscriptions", "Bridges"]
    text = seen["text"]
    assert HOSTILE_SELECTOR in text and HOSTILE_NEIGHBOUR in text  # shown as text, whole
    assert A in text and "reachable" in text and "unreachable" in text
    assert "CREATED" in text and "connected" in text and "This node runs no bridge." in text
    assert len(loaded.screenshot) > 10_000

    url_a = f"http://127.0.0.1:{pair.a.admin_port}/federation"
    loaded_a = await browser_harness.load(url_a, probe=PROBE)
    (tmp_path / "federation-a.png").write_bytes(loaded_a.screenshot)
    text_a = loaded_a.probed["text"]
    assert loaded_a.errors == [] and loaded_a.requests_besides(url_a) == []
    assert B in text_a and "delivery" in text_a and "No subscription at a neighbour." in text_a
    assert HOSTILE_SELECTOR in text_a  # B's subscription here, as B asked for it


async def test_a_reload_shows_the_state_now(pair: Pair) -> None:
    await federate(pair)
    url = f"http://127.0.0.1:{pair.b.admin_port}/federation"
    _, _, before = await fetch(url)
    assert "No subscription at a neighbour." not in before
    if pair.drain is not None:  # its source goes with the subscription
        await asyncio.to_thread(pair.drain.stop)
        pair.drain = None
    client = pair.clients[1]  # the actor at B
    status, body = await client.get(f"/{pair.actor}/subscriptions")
    assert status == 200
    for subscription in body["subscriptions"]:
        status, _ = await client.delete(f"/{pair.actor}/subscriptions/{subscription['id']}")
        assert status == 204
    ii_b = pair.b.ii
    assert ii_b is not None
    await wait_for(lambda: ii_b.status()["outgoing"] == [], "B's subscription at A withdrawn")
    _, _, after = await fetch(url)
    assert "No subscription at a neighbour." in after


async def test_the_other_broker_processes_send_to_process_0(pki: TestPki, tmp_path: Path) -> None:
    pair = await start_pair(pki, tmp_path, A, B, "actor-a",
                            adapt_a=lambda c: with_admin(c).model_copy(update={"broker": c.broker.model_copy(
                                update={"processes": 2})}))
    try:
        workers = pair.a.workers
        assert workers is not None
        status, _, body = await fetch(f"http://127.0.0.1:{workers.ready[0].admin_port}/federation")
        assert status == 404 and "process 0" in body
    finally:
        await pair.close()


# ------------------------------------------------------------------------------- without a browser
class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)


def _hostile_snapshot() -> FederationSnapshot:
    link = Link(HOSTILE, HOSTILE, 5671, HOSTILE, False, 1, 0, 2, HOSTILE)
    return FederationSnapshot(
        HOSTILE, 0, True, (NeighbourRow(HOSTILE, HOSTILE, 1, 0, 0, HOSTILE),),
        (SubscriptionRow("outgoing", HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE, (link,)),),
        (SubscriptionRow("incoming", HOSTILE, HOSTILE, HOSTILE, None, "CREATED", None),),
        (DeliveryRow("delivery", HOSTILE, HOSTILE, HOSTILE, HOSTILE, HOSTILE),),
        (BridgeLink(HOSTILE, HOSTILE, True),))


def _tags(page: str) -> set[str]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def test_every_value_is_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    page = render(_hostile_snapshot())
    assert not _tags(page) & {"script", "img"}
    assert page.count("&lt;script&gt;") >= 15  # every field of every row
    monkeypatch.setattr(federation_view, "_e", str)  # mutant: no escaping
    assert {"script", "img"} <= _tags(render(_hostile_snapshot()))


def test_a_node_without_ii_says_so() -> None:
    page = render(FederationSnapshot("n", 0, False))
    assert "no Improved Interface" in page and "This node runs no bridge." in page
