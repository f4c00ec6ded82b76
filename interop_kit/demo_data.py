"""The demo federation's facts, shared by the shell's demos and the kit's harnesses.

``interchange demo``, ``tlex-demo`` and ``interop --self`` (which assemble nodes, in
:mod:`interchange.app`) and ``federation up`` and the soak (:mod:`interop_kit.federation`,
:mod:`interop_kit.soak`, which start ``interchange broker`` processes) use the same names, the
same actor-1 datasets (a DENM and an IVIM publication around Hazeldonk) and messages; their actors
are clients of :mod:`interchange.actor` with the settings :func:`actor_settings` makes from the
test PKI (mutual TLS 1.3, the actor's certificate).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from certs.tls import TlsFiles
from interchange.actor import Actor, ActorSettings, capability_from_json
from interop_kit.model import Traffic

DOMAIN = "interchange.test"
INTERCHANGE = "a.interchange.test"  # the publishing side
SUBSCRIBER = "b.interchange.test"
NODES = (INTERCHANGE, SUBSCRIBER)
PUBLISHER = "actor-1"
CONSUMER = "actor-2"
DEMO_SELECTOR = "messageType = 'DENM' AND quadTree LIKE '%,1202021%'"
DEMO_DELIVERY = "publisherId = 'NL00001'"  #: actor-1's delivery covers both its datasets
HAZELDONK, VALENCA = "120202130121133020", "031332213323322232"
STEP_S = 20.0
LOOPBACK = "127.0.0.1"


def actor_settings(directory: Path, cn: str, interchange: str, port: int, host: str = LOOPBACK) -> ActorSettings:
    """The settings of actor ``cn`` (a client identity of ``directory``/pki) at ``interchange``'s II."""
    files = TlsFiles.from_pki(directory / "pki", cn, with_crls=False)
    return ActorSettings(node=interchange, ii_url=f"https://{host}:{port}", cert_chain=files.cert_chain, key=files.key,
                         trust_bundle=files.trust_bundle, timeout_s=STEP_S)


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
    async with Actor(actor_settings(directory, actor, interchange, port, host)) as publisher:
        await publisher.api.add_capabilities([capability_from_json(c) for c in demo_capabilities()])
        delivery = await publisher.create_delivery(DEMO_DELIVERY)
    return delivery.endpoints[0].target


def demo_traffic() -> Traffic:
    """The demo's selector; a DENM at Hazeldonk matches it, the same DENM at Valenca does not."""
    return Traffic(DEMO_SELECTOR, demo_properties("DENM", HAZELDONK), {"quadTree": f",{VALENCA},"})
