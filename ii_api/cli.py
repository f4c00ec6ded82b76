"""``interchange neighbours`` and ``interchange discover``: the II's view of the network.

    interchange neighbours [--data-dir DIR]
    interchange discover --dns HOST[:PORT] --domain D [--domain D ...] [--name OWN] [--data-dir DIR]

``neighbours`` prints the neighbours persisted in the data directory; ``discover``
runs one DNS SRV discovery round (IP_073/086/089), stores what it found and prints
it. Problems with single domains are printed to stderr and give exit status 1.
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

from interchange.errors import CliError

DEFAULT_DATA_DIR = Path("var")


def register(subparsers: Any) -> None:
    """Add the ``neighbours`` and ``discover`` subcommands."""
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
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
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
    from ii_api.store import Store, StoreError, db_path

    path = db_path(args.data_dir)
    if not path.is_file():
        raise CliError(f"no II database in {args.data_dir} (run 'interchange discover' or the node first)")
    try:
        with Store(path, create=False) as store:
            neighbours = store.list_neighbours()
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
    from pydantic import ValidationError

    from ii_api.discovery import Discovery, DiscoveryConfig
    from ii_api.store import Store, StoreError

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
            store.upsert_neighbours(result.neighbours)
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
