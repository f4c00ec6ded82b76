"""The demo federation's facts, shared by the shell's demos and the kit's harnesses.

``interchange demo``, ``tlex-demo`` and ``interop --self`` (which assemble nodes, in
:mod:`interchange.app`) and ``federation up`` and the soak (:mod:`interop_kit.federation`,
:mod:`interop_kit.soak`, which start ``interchange broker`` processes) use the same names, the
same actor-1 datasets (a DENM and an IVIM publication around Hazeldonk) and messages, and
:class:`ActorClient`, a C-ITS actor's HTTPS client for a node's local actor API (mutual TLS 1.3,
the actor's certificate from the test PKI).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from certs.tls import TlsFiles, client_context
from interchange.ground.errors import CliError
from interop_kit.model import Traffic

DOMAIN = "interchange.test"
INTERCHANGE = "a.interchange.test"  # the publishing side
SUBSCRIBER = "b.interchange.test"
NODES = (INTERCHANGE, SUBSCRIBER)
PUBLISHER = "actor-1"
CONSUMER = "actor-2"
DEMO_SELECTOR = "messageType = 'DENM' AND quadTree LIKE '%,1202021%'"
HAZELDONK, VALENCA = "120202130121133020", "031332213323322232"
STEP_S = 20.0
LOOPBACK = "127.0.0.1"


class ActorClient:
    """A C-ITS actor's HTTPS client for one interchange's local actor API."""

    def __init__(self, directory: Path, cn: str, interchange: str, port: int, host: str = LOOPBACK) -> None:
        self.cn, self.interchange, self.port, self.host = cn, interchange, port, host
        self._context = client_context(TlsFiles.from_pki(directory / "pki", cn, with_crls=False))
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=STEP_S))

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"https://{self.host}:{self.port}/{self.cn}/{path}"
        async with self._session.request(method, url, json=body, ssl=self._context,
                                         server_hostname=self.interchange) as response:
            data = await response.json()
            if response.status >= 300:
                raise CliError(f"{method} {url}: HTTP {response.status}: {data}")
            return data

    async def close(self) -> None:
        await self._session.close()


def demo_capabilities() -> list[dict[str, Any]]:
    """actor-1's two datasets: a DENM and an IVIM publication around Hazeldonk (NL)."""
    common = {"publisherId": "NL00001", "originatingCountry": "NL"}
    return [
        {"application": {**common, "messageType": "DENM", "publicationId": "NL00001:denm-demo",
                         "protocolVersion": "DENM:1.3.1", "quadTree": ["1202021", "0313322"], "causeCode": [1, 94]},
         "metadata": {"infoURL": "https://example.nl/denm", "redirectPolicy": "OPTIONAL"}},
        {"application": {**common, "messageType": "IVIM", "publicationId": "NL00001:ivim-demo",
                         "protocolVersion": "IVIM:1.2.1", "quadTree": ["1202021"]}, "metadata": {}},
    ]


def demo_properties(kind: str, tile: str) -> dict[str, Any]:
    """Application properties (Table 1) of a message of one of actor-1's datasets at quadtree ``tile``."""
    props: dict[str, Any] = {"publisherId": "NL00001", "publicationId": f"NL00001:{kind.lower()}-demo",
                             "originatingCountry": "NL",
                             "protocolVersion": "DENM:1.3.1" if kind == "DENM" else f"{kind}:1.2.1",
                             "messageType": kind, "quadTree": f",{tile},"}
    if kind == "DENM":
        props.update(causeCode=1, subCauseCode=0)
    return props


async def register_demo_datasets(directory: Path, actor: str, interchange: str, port: int,
                                 host: str = LOOPBACK) -> str:
    """``actor`` (a client identity of ``directory``/pki) registers the demo's datasets and a delivery
    at ``interchange``; the delivery's target address."""
    publisher = ActorClient(directory, actor, interchange, port, host)
    try:
        await publisher.call("POST", "capabilities", {"capabilities": demo_capabilities()})
        answer = await publisher.call("POST", "deliveries", {"deliveries": [{"selector": "publisherId = 'NL00001'"}]})
    finally:
        await publisher.close()
    address: str = answer["deliveries"][0]["endpoints"][0]["target"]
    return address


def demo_traffic() -> Traffic:
    """The demo's selector; a DENM at Hazeldonk matches it, the same DENM at Valenca does not."""
    return Traffic(DEMO_SELECTOR, demo_properties("DENM", HAZELDONK), {"quadTree": f",{VALENCA},"})
