"""``interchange neighbours``, ``discover`` and ``subscriptions``: the II's view of the network.

    interchange neighbours [--data-dir DIR]
    interchange discover --dns HOST[:PORT] --domain D [--domain D ...] [--name OWN] [--data-dir DIR]
    interchange subscriptions --config FILE [--json]

``neighbours`` prints the neighbours persisted in the data directory; ``discover`` runs one DNS SRV
discovery round (IP_073/086/089), stores and prints what it found (a problem with one domain goes
to stderr, exit status 1). ``subscriptions`` (registered by :mod:`interchange.app.node_cli`) prints
the II's subscriptions (neighbours' here, IP_078; ours at neighbours, IP_079; local actors'
subscriptions and deliveries) read-only from the node's data directory, so also while it runs.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ii_api.peers.discovery import Discovery, DiscoveryConfig
from ii_api.storage.store import Store, StoreError, db_path
from interchange.ground.errors import CliError

DEFAULT_DATA_DIR = Path("var")


def register(subparsers: Any) -> None:
    """Add the ``neighbours`` and ``discover`` subcommands (``subscriptions`` needs the node's config:
    :mod:`interchange.app.node_cli` adds it, using :func:`read_subscriptions` and :func:`format_subscriptions`)."""
    neighbours = subparsers.add_parser(
        "neighbours", help="list the neighbour interchanges found by discovery",
        description="Print the neighbours persisted in the II database of a data directory.")
    _data_dir_option(neighbours)
    neighbours.set_defaults(handler=run)

    discover = subparsers.add_parser(
        "discover", help="run one DNS SRV discovery of neighbour interchanges (IP_073/086/089)",
        description="Look up _ixc._tcp.<domain> SRV records and their targets' A records in every "
                    "trusted domain, store the neighbours found and print them.")
    discover.add_argument("--dns", required=True, metavar="HOST[:PORT]",
                          help="DNS server to ask, an IP address with optional port (default 53); "
                               "IPv6 as [ADDR]:PORT")
    discover.add_argument("--domain", required=True, action="append", metavar="DOMAIN",
                          help="trusted domain name (repeat for several)")
    discover.add_argument("--name", help="this interchange's own name, left out of the neighbours")
    discover.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                          help="time limit of each DNS lookup (default 5)")
    _data_dir_option(discover)
    discover.set_defaults(handler=run_discover)



def _data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, metavar="DIR",
                        help=f"the node's data directory (default {DEFAULT_DATA_DIR})")


def parse_dns_server(text: str) -> tuple[str, int]:
    """``HOST``, ``HOST:PORT`` or ``[IPv6]:PORT`` to (address, port); CliError when invalid."""
    host, port_text = text.strip(), "53"
    if host.startswith("["):
        inside, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise CliError(f"--dns: cannot read {text!r} (use ADDR, ADDR:PORT or [IPv6]:PORT)")
        host, port_text = inside, rest[1:] or "53"
    elif host.count(":") == 1:
        host, port_text = host.split(":")
    try:
        address = str(ipaddress.ip_address(host))
    except ValueError:
        raise CliError(f"--dns: {host!r} is not an IP address") from None
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise CliError(f"--dns: port must be 1-65535, got {port_text!r}")
    return address, int(port_text)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces."""
    cells = [list(header)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def run(args: argparse.Namespace) -> int:
    """``interchange neighbours``: print the persisted neighbour list."""
    path = db_path(args.data_dir)
    if not path.is_file():
        raise CliError(f"no II database in {args.data_dir} (run 'interchange discover' or the node first)")
    try:
        with Store(path, create=False) as store:
            neighbours = store.neighbours.list()
    except StoreError as exc:
        raise CliError(str(exc)) from None
    if not neighbours:
        print(f"no neighbours recorded in {path}")
        return 0
    print(format_table(("NAME", "HOST", "PORT", "DOMAIN", "LAST SEEN"),
                       ((n.name, n.host, n.port, n.domain, _iso(n.last_seen_ms)) for n in neighbours)))
    return 0


def run_discover(args: argparse.Namespace) -> int:
    """``interchange discover``: one discovery round, stored and printed."""
    server, port = parse_dns_server(args.dns)
    try:
        config = DiscoveryConfig(dns_server=server, dns_port=port, domains=tuple(args.domain),
                                 own_name=args.name, timeout_s=args.timeout)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise CliError(problems) from None
    result = asyncio.run(Discovery(config).run_once())
    try:
        with Store.open(args.data_dir) as store:
            store.neighbours.upsert(result.neighbours)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    if result.neighbours:
        print(format_table(("NAME", "HOST", "PORT", "DOMAIN", "PRIORITY", "WEIGHT"),
                           ((n.name, n.host, n.port, n.domain, n.priority, n.weight) for n in result.neighbours)))
    else:
        print("no neighbours found")
    for error in result.errors:
        print(f"interchange discover: {error}", file=sys.stderr)
    return 1 if result.errors else 0


# --------------------------------------------------------------------------- interchange subscriptions
class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IncomingReport(_Report):
    """A neighbour's subscription here (IP_078), with the broker source and grant behind it."""

    neighbour: str
    id: int
    selector: str
    consumerCommonName: str | None
    status: str
    source: str | None
    granted: list[str] | None
    endpoints: list[dict[str, Any]]
    errorMessage: str | None
    lastUpdated: str


class OutgoingReport(_Report):
    """Our subscription at a neighbour (IP_079): NEW / DELETING or the neighbour's last status."""

    neighbour: str
    id: int
    selector: str
    consumerCommonName: str | None
    status: str
    remoteId: str | None
    path: str | None
    endpoints: list[dict[str, Any]]
    errorMessage: str | None
    lastUpdated: str


class LocalSubscriptionReport(_Report):
    actor: str
    id: int
    selector: str
    consumerCommonName: str | None
    status: str
    endpoints: list[dict[str, Any]]
    errorMessage: str | None
    lastUpdated: str


class DeliveryReport(_Report):
    actor: str
    id: int
    selector: str
    status: str
    target: str | None
    errorMessage: str | None
    lastUpdated: str


class SubscriptionsReport(_Report):
    """What ``interchange subscriptions --json`` prints."""

    name: str
    database: str
    incoming: list[IncomingReport]
    outgoing: list[OutgoingReport]
    localSubscriptions: list[LocalSubscriptionReport]
    deliveries: list[DeliveryReport]


def read_subscriptions(name: str, data_dir: Path) -> SubscriptionsReport:
    """The report from a data directory's II database, opened read-only; CliError without one."""
    path = db_path(data_dir)
    if not path.is_file():
        raise CliError(f"no II database in {data_dir} (the node has not run with [ii] there)")
    try:
        with Store(path, read_only=True) as store:
            incoming = store.incoming.list()
            outgoing = store.outgoing.list()
            local = store.local_subscriptions.list()
            deliveries = store.deliveries.list()
    except StoreError as exc:
        raise CliError(str(exc)) from None
    return SubscriptionsReport(
        name=name, database=str(path),
        incoming=[IncomingReport(neighbour=r.owner_cn, id=r.id, selector=r.selector,
                                 consumerCommonName=r.consumer_common_name, status=r.status,
                                 source=r.source_address, granted=r.granted, endpoints=r.endpoints,
                                 errorMessage=r.error, lastUpdated=_iso(r.last_updated_ms)) for r in incoming],
        outgoing=[OutgoingReport(neighbour=r.neighbour, id=r.id, selector=r.selector,
                                 consumerCommonName=r.consumer_common_name, status=r.status, remoteId=r.remote_id,
                                 path=r.remote_path, endpoints=r.endpoints, errorMessage=r.error,
                                 lastUpdated=_iso(r.last_updated_ms)) for r in outgoing],
        localSubscriptions=[LocalSubscriptionReport(actor=r.actor_cn, id=r.id, selector=r.selector,
                                                    consumerCommonName=r.consumer_common_name, status=r.status,
                                                    endpoints=r.endpoints, errorMessage=r.error,
                                                    lastUpdated=_iso(r.last_updated_ms)) for r in local],
        deliveries=[DeliveryReport(actor=r.actor_cn, id=r.id, selector=r.selector, status=r.status,
                                   target=r.target_address, errorMessage=r.error,
                                   lastUpdated=_iso(r.last_updated_ms)) for r in deliveries])


def _one_line(text: str | None) -> str:
    return " ".join(text.split()) if text else "-"


def _endpoints(endpoints: Iterable[dict[str, Any]]) -> str:
    """``host:port/source`` (or ``/target``) of each endpoint, comma separated; ``-`` for none."""
    shown = [f"{e.get('host')}:{e.get('port')}/{e.get('source') or e.get('target')}" for e in endpoints]
    return ",".join(shown) or "-"


def format_subscriptions(report: SubscriptionsReport) -> str:
    """The report as four titled tables (a section without rows says so)."""
    sections: list[tuple[str, Sequence[str], list[Sequence[object]]]] = [
        ("Subscriptions of neighbours here (incoming)",
         ("NEIGHBOUR", "ID", "STATUS", "SELECTOR", "SOURCE", "ENDPOINTS", "ERROR"),
         [(r.neighbour, r.id, r.status, _one_line(r.selector), r.source or "-", _endpoints(r.endpoints),
           _one_line(r.errorMessage)) for r in report.incoming]),
        ("Our subscriptions at neighbours (outgoing)",
         ("NEIGHBOUR", "ID", "STATUS", "SELECTOR", "CONSUMER", "ENDPOINTS", "ERROR"),
         [(r.neighbour, r.id, r.status, _one_line(r.selector), r.consumerCommonName or "-", _endpoints(r.endpoints),
           _one_line(r.errorMessage)) for r in report.outgoing]),
        ("Local actors' subscriptions",
         ("ACTOR", "ID", "STATUS", "SELECTOR", "ENDPOINTS", "ERROR"),
         [(r.actor, r.id, r.status, _one_line(r.selector), _endpoints(r.endpoints), _one_line(r.errorMessage))
          for r in report.localSubscriptions]),
        ("Local actors' deliveries",
         ("ACTOR", "ID", "STATUS", "SELECTOR", "TARGET", "ERROR"),
         [(r.actor, r.id, r.status, _one_line(r.selector), r.target or "-", _one_line(r.errorMessage))
          for r in report.deliveries]),
    ]
    blocks = [f"{title}:\n" + (format_table(header, rows) if rows else "(none)") for title, header, rows in sections]
    return "\n\n".join(blocks)
