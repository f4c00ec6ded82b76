"""The federation view of the admin endpoint (``GET /federation``): what this node's Improved
Interface knows and how its bridges are linked, as one read-only HTML page for operators.

:func:`take_snapshot` reads the state through the doors that exist (the II's neighbour directory,
pushers and outgoing runners in memory; neighbours' subscriptions, deliveries and actors'
subscriptions from the II's store; the bridges' link flags) into a frozen
:class:`FederationSnapshot`; the node's metrics (:mod:`interchange.app.node_metrics`) export the
same snapshot, so the page and the alerts never disagree. :func:`render` turns it into HTML: every
value from the state goes through :func:`html.escape` (a neighbour's name, a selector or an error
text a peer sent are data, never markup); the page has no script and fetches nothing (the admin
endpoint also sends a Content-Security-Policy that forbids both). It is rendered on each request:
a reload shows the state now.
"""
from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ii_api.node.runtime import RunningII
from ii_api.peers.federation import LinkStatus
from interchange.bridges.if2.metrics import If2View
from interchange.ground.timing import now_ms

if TYPE_CHECKING:
    from interchange.bridges.tlex.bridge import TlexBridge

#: Content-Security-Policy of the page: nothing but its own inline style
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'"


@dataclass(frozen=True)
class Link:
    """One federation link of an outgoing subscription (a receiver on a neighbour's source)."""

    neighbour: str
    host: str
    port: int
    source: str
    connected: bool
    received: int
    rejected: int
    connects: int
    last_error: str | None


@dataclass(frozen=True)
class NeighbourRow:
    name: str
    host: str
    port: int
    capabilities: int
    pushes: int
    last_error: str | None

    @property
    def reachable(self) -> bool | None:
        """False after a failed capability POST, True after a successful one, None before the first."""
        if self.last_error is not None:
            return False
        return True if self.pushes else None


@dataclass(frozen=True)
class SubscriptionRow:
    """A subscription between this node and a neighbour: ``outgoing`` (ours, at the neighbour) or
    ``incoming`` (the neighbour's, here)."""

    direction: str
    neighbour: str
    id: str
    selector: str
    consumer: str | None
    status: str
    error: str | None
    links: tuple[Link, ...] = ()


@dataclass(frozen=True)
class DeliveryRow:
    """A local actor's delivery (where it publishes) or subscription (what it receives)."""

    kind: str
    actor: str
    id: str
    selector: str
    status: str
    error: str | None


@dataclass(frozen=True)
class BridgeLink:
    bridge: str  #: tlex, if2
    link: str  #: what is linked: tlex-session, rabbitmq, bi
    connected: bool


@dataclass(frozen=True)
class FederationSnapshot:
    node: str
    taken_ms: int
    has_ii: bool
    neighbours: tuple[NeighbourRow, ...] = ()
    outgoing: tuple[SubscriptionRow, ...] = ()
    incoming: tuple[SubscriptionRow, ...] = ()
    actors: tuple[DeliveryRow, ...] = ()
    bridges: tuple[BridgeLink, ...] = ()
    #: (neighbour, source, DER) of the server certificate behind each open federation link
    neighbour_certificates: tuple[tuple[str, str, bytes], ...] = ()


def _link(status: LinkStatus) -> Link:
    e = status.endpoint
    return Link(e.neighbour, e.host, e.port, e.source, status.connected, status.received, status.rejected,
                status.connects, status.last_error)


def bridge_links(tlex: TlexBridge | None, if2: If2View | None) -> tuple[BridgeLink, ...]:
    """The link flags of the bridges this node runs."""
    links = []
    if tlex is not None:
        stats = tlex.supervisor.stats if tlex.supervisor is not None else None
        links.append(BridgeLink("tlex", "tlex-session", bool(stats and stats.connected)))
    if if2 is not None:
        links += [BridgeLink("if2", "rabbitmq", if2.rabbitmq_connected), BridgeLink("if2", "bi", if2.bi_connected)]
    return tuple(links)


async def take_snapshot(node: str, ii: RunningII | None, bridges: tuple[BridgeLink, ...]) -> FederationSnapshot:
    """The II's federation state now (in memory, and three reads of its store) and the bridges' links."""
    if ii is None:
        return FederationSnapshot(node, now_ms(), False, bridges=bridges)
    service, store = ii.service, ii.store
    neighbours = []
    for n in service.neighbours:
        pusher = service.pusher_state(n.name)
        neighbours.append(NeighbourRow(n.name, n.host, n.port, len(service.neighbour_caps.of(n.name)),
                                       pusher.pushes if pusher else 0, pusher.last_error if pusher else None))
    outgoing, certificates = [], []
    for runner in service.outgoing.runners():
        machine, key = runner.machine, runner.key
        status = machine.status.value if machine.status is not None else machine.phase.value
        outgoing.append(SubscriptionRow("outgoing", key.neighbour, str(runner.row_id), key.selector,
                                        key.consumer_common_name, status, machine.error,
                                        tuple(_link(s) for s in runner.links())))
        if runner.federation is not None:
            certificates += [(e.neighbour, e.source, der) for e, der in runner.federation.peer_certificates()]
    incoming = [SubscriptionRow("incoming", r.owner_cn, str(r.id), r.selector, r.consumer_common_name, r.status,
                                r.error) for r in await store.incoming.list()]
    actors = [DeliveryRow("delivery", r.actor_cn, str(r.id), r.selector, r.status, r.error)
              for r in await store.deliveries.list()]
    actors += [DeliveryRow("subscription", r.actor_cn, str(r.id), r.selector, r.status, r.error)
               for r in await store.local_subscriptions.list()]
    return FederationSnapshot(node, now_ms(), True, tuple(neighbours), tuple(outgoing), tuple(incoming),
                              tuple(actors), bridges, tuple(certificates))


# ----------------------------------------------------------------------------------- rendering
_GOOD = {"CREATED", "connected", "reachable"}
_WAITING = {"REQUESTED", "RESUBSCRIBE", "NEW", "ACTIVE", "not yet contacted"}

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1d2430;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em;border-bottom:1px solid #ccd}
p.meta{color:#556;margin:0}table{border-collapse:collapse;width:100%;font-size:.9em}
th,td{text-align:left;padding:.25em .6em;border-bottom:1px solid #e4e6ec;vertical-align:top}
th{background:#f2f4f8}td.sel,td.err{font-family:ui-monospace,monospace;word-break:break-all}
.ok{color:#11692e;font-weight:600}.wait{color:#8a5a00;font-weight:600}.bad{color:#b00020;font-weight:600}
p.none{color:#667;font-style:italic}
"""


def _e(value: object) -> str:
    return "" if value is None else html.escape(str(value), quote=True)


def _status(text: str) -> str:
    """A status cell: its class comes from a fixed set, never from the text itself."""
    css = "ok" if text in _GOOD else "wait" if text in _WAITING else "bad"
    return f'<td class="{css}">{_e(text)}</td>'


def _table(caption: str, headers: Sequence[str], rows: Iterable[str], empty: str) -> str:
    body = "".join(rows)
    if not body:
        return f"<h2>{_e(caption)}</h2><p class=\"none\">{_e(empty)}</p>"
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return f"<h2>{_e(caption)}</h2><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _neighbour(n: NeighbourRow) -> str:
    state = {True: "reachable", False: "unreachable", None: "not yet contacted"}[n.reachable]
    return (f"<tr><td>{_e(n.name)}</td><td>{_e(n.host)}:{_e(n.port)}</td>{_status(state)}"
            f"<td>{_e(n.capabilities)}</td><td>{_e(n.pushes)}</td><td class=\"err\">{_e(n.last_error)}</td></tr>")


def _links(links: Sequence[Link]) -> str:
    if not links:
        return "<td></td>"
    parts = [f"{_e(link.host)}:{_e(link.port)}/{_e(link.source)}: "
             f"<span class=\"{'ok' if link.connected else 'bad'}\">{'connected' if link.connected else 'down'}</span>"
             f", {_e(link.received)} received"
             + (f", {_e(link.last_error)}" if link.last_error and not link.connected else "")
             for link in links]
    return "<td>" + "<br>".join(parts) + "</td>"


def _subscription(s: SubscriptionRow) -> str:
    links = _links(s.links) if s.direction == "outgoing" else ""
    return (f"<tr><td>{_e(s.neighbour)}</td><td>{_e(s.id)}</td><td class=\"sel\">{_e(s.selector)}</td>"
            f"<td>{_e(s.consumer)}</td>{_status(s.status)}<td class=\"err\">{_e(s.error)}</td>{links}</tr>")


def _actor(d: DeliveryRow) -> str:
    return (f"<tr><td>{_e(d.actor)}</td><td>{_e(d.kind)}</td><td>{_e(d.id)}</td><td class=\"sel\">{_e(d.selector)}"
            f"</td>{_status(d.status)}<td class=\"err\">{_e(d.error)}</td></tr>")


def _bridge(b: BridgeLink) -> str:
    return f"<tr><td>{_e(b.bridge)}</td><td>{_e(b.link)}</td>{_status('connected' if b.connected else 'down')}</tr>"


def render(snapshot: FederationSnapshot) -> str:
    """The page (UTF-8 HTML, no script, no external resource)."""
    taken = dt.datetime.fromtimestamp(snapshot.taken_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections: list[str] = []
    if not snapshot.has_ii:
        sections.append("<p class=\"none\">This node runs no Improved Interface ([ii]): no federation.</p>")
    else:
        sections += [
            _table("Neighbours", ("name", "address", "state", "capabilities", "capability pushes", "last error"),
                   map(_neighbour, snapshot.neighbours), "No neighbour discovered."),
            _table("Our subscriptions at neighbours", ("neighbour", "id", "selector", "consumer", "status", "error",
                                                       "federation links"),
                   map(_subscription, snapshot.outgoing), "No subscription at a neighbour."),
            _table("Neighbours' subscriptions here", ("neighbour", "id", "selector", "consumer", "status", "error"),
                   map(_subscription, snapshot.incoming), "No neighbour subscribes here."),
            _table("Local actors' deliveries and subscriptions", ("actor", "kind", "id", "selector", "status", "error"),
                   map(_actor, snapshot.actors), "No delivery or subscription of a local actor."),
        ]
    sections.append(_table("Bridges", ("bridge", "link", "state"), map(_bridge, snapshot.bridges),
                           "This node runs no bridge."))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Federation of {_e(snapshot.node)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>Federation of {_e(snapshot.node)}</h1><p class=\"meta\">As of {_e(taken)}; reload for the state "
            "now.</p>" + "".join(sections) + "</body></html>")

