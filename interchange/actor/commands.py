"""The commands of ``interchange actor`` (:mod:`interchange.actor.cli` parses, these act).

Each command is a coroutine ``(args) -> exit status`` over the library; what it prints goes to
stdout (tables, or JSON with ``--json``), status changes and progress to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cryptography import x509

from ii_api.wire.models import Capability, Delivery, LocalSubscription
from interchange.actor.areas import parse_area
from interchange.actor.capabilities import build_capability, capability_from_json
from interchange.actor.client import Actor
from interchange.actor.errors import ActorError
from interchange.actor.output import table
from interchange.actor.selectors import Overlap, check_selector as parse_selector, overlap
from interchange.actor.settings import ActorSettings, load_settings

__all__ = ["CONFIG_ENV", "actor_from_args", "check_selector", "settings_from_args", "whoami"]

Add = Callable[..., argparse.ArgumentParser]


CONFIG_ENV = "INTERCHANGE_ACTOR_CONFIG"
DEFAULT_CONFIG = Path("actor.toml")


def config_path(args: argparse.Namespace) -> Path | None:
    """``--config``, else ``$INTERCHANGE_ACTOR_CONFIG``, else ``./actor.toml`` if there is one."""
    given = args.config or os.environ.get(CONFIG_ENV)
    if given:
        return Path(given)
    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


def settings_from_args(args: argparse.Namespace) -> ActorSettings:
    """The settings file with the connection flags on top."""
    discovery = None
    if args.domain:
        discovery = {"domain": args.domain, "dns_server": args.dns_server or "127.0.0.1",
                     "dns_port": args.dns_port or 53}
    return load_settings(config_path(args), node=args.node, ii_url=args.ii_url, discovery=discovery,
                         cert_chain=args.cert, key=args.key, trust_bundle=args.trust,
                         crls=tuple(args.crl) if args.crl else None, timeout_s=args.timeout)


def _settings(args: argparse.Namespace) -> ActorSettings:
    return settings_from_args(args)


def actor_from_args(args: argparse.Namespace) -> Actor:
    return Actor(settings_from_args(args))


_actor = actor_from_args


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def _status_line(kind: str) -> Callable[[Delivery | LocalSubscription], None]:
    def show(item: Delivery | LocalSubscription) -> None:
        where = ", ".join(f"{getattr(e, 'target', None) or getattr(e, 'source', '')} at {e.host}:{e.port}"
                          for e in item.endpoints)
        reason = f": {item.errorMessage}" if item.errorMessage else ""
        print(f"{kind} {item.id}: {item.status.value}{reason}{' -> ' + where if where else ''}", file=sys.stderr,
              flush=True)
    return show


# ---------------------------------------------------------------------------------------- whoami
ROLES = {"interchange": "an interchange", "actor": "a local actor"}


def _certificate_line(settings: ActorSettings) -> str:
    try:
        cert = x509.load_pem_x509_certificate(settings.cert_chain.read_bytes())
    except (OSError, ValueError) as exc:
        raise ActorError(f"cannot read your certificate {settings.cert_chain}: {exc}", "check cert_chain") from None
    until = cert.not_valid_after_utc
    left = (until - datetime.now(timezone.utc)).days
    return f"{settings.cert_chain} (valid until {until:%Y-%m-%d}, {left} days)"


async def whoami(args: argparse.Namespace) -> int:
    settings = _settings(args)
    async with Actor(settings) as actor:
        me = await actor.api.whoami()
        base = await actor.api.base_url()
    if args.json:
        _print_json(me.to_json())
        return 0
    rows: list[tuple[str, str]] = [("certificate", _certificate_line(settings)),
                                   ("node", f"{me.interchange} at {base}"),
                                   ("the node sees", f"{me.name}, {ROLES[me.role]}, "
                                                     f"{'allowed' if me.allowed else 'refused'}")]
    if me.permissions is not None:
        def listed(values: Sequence[str]) -> str:
            return "everything" if "*" in values else ", ".join(values) or "nothing"
        rows += [("may publish", listed(me.permissions.publishMessageTypes)),
                 ("as publisherIds", listed(me.permissions.publisherIds)),
                 ("may subscribe to", listed(me.permissions.subscribeMessageTypes)),
                 ("API", f"{base.rstrip('/')}{me.path or ''}"[len(base.rstrip('/')):] or "/")]
    if not me.policyConfigured:
        rows.append(("note", "the node has no actor policy: every actor may do everything"))
    if me.reason:
        rows.append(("why", me.reason))
    for label, value in rows:
        print(f"{label:<17} {value}")
    return 0 if me.allowed else 1


# ---------------------------------------------------------------------------------- capabilities
def add_capability_commands(sub: Any, add: Add, common: argparse.ArgumentParser) -> None:
    parser = add(sub, "capabilities", capabilities_list, common, "your capabilities: list (default), add, delete")
    inner = parser.add_subparsers(dest="capabilities_action", metavar="ACTION")
    adding = inner.add_parser("add", parents=[common], help="register a capability (checked locally first)")
    adding.set_defaults(actor_command=capabilities_add)
    adding.add_argument("--type", required=True, dest="message_type", help="DENM, IVIM, SPATEM, MAPEM, SREM, SSEM, "
                        "CPM, POIM-PA or CAM")
    adding.add_argument("--publisher-id", required=True, help="e.g. NL00001 (country letters and a number)")
    adding.add_argument("--publication-id", required=True, help="the dataset's id (publisherId: is put in front)")
    adding.add_argument("--protocol-version", required=True, help="e.g. DENM:1.3.1")
    adding.add_argument("--country", help="originatingCountry (default: the publisherId's letters)")
    area_flags(adding)
    adding.add_argument("--zoom", type=int, help="zoom of the area tiles (default: the message type's, IP_112/113)")
    adding.add_argument("--cause-code", type=int, action="append", help="a DENM causeCode (repeat for several)")
    adding.add_argument("--shard-count", type=int, help="shards (appendix G)")
    adding.add_argument("--redirect", choices=("OPTIONAL", "MANDATORY", "NOT_AVAILABLE"), help="redirectPolicy")
    adding.add_argument("--info-url", help="infoURL")
    adding.add_argument("--file", type=Path, help="add the capability documents of this JSON file instead "
                        "(a list, or {\"capabilities\": [...]})")
    adding.add_argument("--json", action="store_true")
    deleting = inner.add_parser("delete", parents=[common], help="withdraw a capability")
    deleting.set_defaults(actor_command=capabilities_delete)
    deleting.add_argument("id")
    for each in (parser, inner.add_parser("list", parents=[common], help="list them")):
        each.add_argument("--json", action="store_true")
    inner.choices["list"].set_defaults(actor_command=capabilities_list)


def area_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--point", metavar="LAT,LON", help="the area's centre (WGS84)")
    parser.add_argument("--radius", type=float, metavar="METRES", help="the area's radius around --point")
    parser.add_argument("--polygon", metavar="LAT,LON;LAT,LON;...", help="the area as a polygon")
    parser.add_argument("--tiles", metavar="T1,T2", help="the area as quadtree tiles")


def _capability_rows(items: Sequence[tuple[str, Capability]]) -> list[list[str]]:
    rows = [["ID", "TYPE", "PUBLICATION", "PUBLISHER", "TILES"]]
    for item_id, cap in items:
        app = cap.application
        tiles = ",".join(app.quadTree)
        rows.append([item_id, str(app.messageType), str(app.publicationId), str(app.publisherId),
                     tiles if len(tiles) < 40 else tiles[:37] + "..."])
    return rows


async def capabilities_list(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        listed = await actor.api.capabilities()
    if args.json:
        _print_json([c.to_json() for c in listed])
    elif listed:
        table(_capability_rows([(c.id, c.definition) for c in listed]))
    else:
        print("no capabilities (add one: interchange actor capabilities add --help)")
    return 0


def _capabilities_to_add(args: argparse.Namespace) -> list[Capability]:
    if args.file is not None:
        try:
            data = json.loads(args.file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ActorError(f"cannot read {args.file}: {exc}") from None
        documents = data.get("capabilities") if isinstance(data, dict) else data
        if not isinstance(documents, list) or not documents:
            raise ActorError(f"{args.file}: expected a list of capabilities")
        return [capability_from_json(d) for d in documents]
    area = parse_area(point=args.point, radius_m=args.radius, polygon=args.polygon, tiles=args.tiles)
    if area is None:
        raise ActorError("no area", "give --point LAT,LON [--radius M], --polygon or --tiles")
    return [build_capability(message_type=args.message_type, publisher_id=args.publisher_id,
                             publication_id=args.publication_id, protocol_version=args.protocol_version, area=area,
                             originating_country=args.country, zoom=args.zoom, cause_codes=args.cause_code,
                             shard_count=args.shard_count, redirect_policy=args.redirect, info_url=args.info_url)]


async def capabilities_add(args: argparse.Namespace) -> int:
    wanted = _capabilities_to_add(args)
    async with _actor(args) as actor:
        added = await actor.api.add_capabilities(wanted)
    if args.json:
        _print_json([c.to_json() for c in added])
    else:
        table(_capability_rows([(c.id, c.definition) for c in added]))
    return 0


async def capabilities_delete(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        await actor.api.delete_capability(args.id)
    print(f"capability {args.id} deleted")
    return 0


# ------------------------------------------------------------------------------------ deliveries
def add_delivery_commands(sub: Any, add: Add, common: argparse.ArgumentParser) -> None:
    parser = add(sub, "deliveries", deliveries_list, common, "where you publish: list (default), add, delete")
    parser.add_argument("--json", action="store_true")
    inner = parser.add_subparsers(dest="deliveries_action", metavar="ACTION")
    adding = inner.add_parser("add", parents=[common], help="ask for a delivery (waits until CREATED)")
    adding.set_defaults(actor_command=deliveries_add)
    adding.add_argument("selector", nargs="?", default="TRUE", help="which of your capabilities it covers "
                        "(default TRUE: all)")
    adding.add_argument("--wait", type=float, default=30.0, metavar="S", help="seconds to wait for a final status")
    deleting = inner.add_parser("delete", parents=[common], help="remove a delivery")
    deleting.set_defaults(actor_command=deliveries_delete)
    deleting.add_argument("id")
    listing = inner.add_parser("list", parents=[common], help="list them")
    listing.set_defaults(actor_command=deliveries_list)
    listing.add_argument("--json", action="store_true")


def _endpoint_rows(items: Sequence[Delivery | LocalSubscription]) -> list[list[str]]:
    rows = [["ID", "STATUS", "SELECTOR", "ENDPOINT", "ERROR"]]
    for item in items:
        ends = ", ".join(f"{e.host}:{e.port} {getattr(e, 'target', None) or getattr(e, 'source', '')}"
                         for e in item.endpoints)
        rows.append([item.id, item.status.value, item.selector, ends, item.errorMessage or ""])
    return rows


async def deliveries_list(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        listed = await actor.api.deliveries()
    if getattr(args, "json", False):
        _print_json([d.to_json() for d in listed])
    elif listed:
        table(_endpoint_rows(listed))
    else:
        print("no deliveries (ask for one: interchange actor deliveries add)")
    return 0


async def deliveries_add(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        result = await actor.check_selector(args.selector, against="mine")
        _print_overlap(result, "your capabilities", verbose=not result.any)
        delivery = await actor.create_delivery(args.selector, timeout_s=args.wait, on_change=_status_line("delivery"))
    print(f"delivery {delivery.id}: {delivery.status.value}: publish to {delivery.endpoints[0].target} at "
          f"amqps://{delivery.endpoints[0].host}:{delivery.endpoints[0].port}")
    return 0


async def deliveries_delete(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        await actor.api.delete_delivery(args.id)
    print(f"delivery {args.id} deleted")
    return 0


# --------------------------------------------------------------------------------- subscriptions
def add_subscription_commands(sub: Any, add: Add, common: argparse.ArgumentParser) -> None:
    subscribing = add(sub, "subscribe", subscribe, common, "subscribe with a selector; prints status changes until "
                      "CREATED")
    subscribing.add_argument("selector")
    subscribing.add_argument("--redirect", action="store_true", help="ask neighbours for their endpoints too "
                             "(consumerCommonName = you)")
    subscribing.add_argument("--wait", type=float, default=30.0, metavar="S", help="seconds to wait for a final status")
    subscribing.add_argument("--no-check", action="store_true", help="skip the overlap check before subscribing")
    subscribing.add_argument("--json", action="store_true")
    parser = add(sub, "subscriptions", subscriptions_list, common, "your subscriptions: list (default), delete")
    parser.add_argument("--json", action="store_true")
    inner = parser.add_subparsers(dest="subscriptions_action", metavar="ACTION")
    deleting = inner.add_parser("delete", parents=[common], help="end a subscription")
    deleting.set_defaults(actor_command=subscriptions_delete)
    deleting.add_argument("id")
    listing = inner.add_parser("list", parents=[common], help="list them")
    listing.set_defaults(actor_command=subscriptions_list)
    listing.add_argument("--json", action="store_true")


async def subscribe(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        if not args.no_check:
            result = await actor.check_selector(args.selector, against="network")
            _print_overlap(result, "the federation's capabilities", verbose=not result.any)
        subscription = await actor.subscribe(args.selector, redirect=args.redirect, timeout_s=args.wait,
                                             on_change=_status_line("subscription"))
    if args.json:
        _print_json(subscription.to_json())
    else:
        end = subscription.endpoints[0]
        print(f"subscription {subscription.id}: CREATED: listen with `interchange actor listen {subscription.id}` "
              f"(source {end.source} at amqps://{end.host}:{end.port})")
    return 0


async def subscriptions_list(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        listed = await actor.api.subscriptions()
    if getattr(args, "json", False):
        _print_json([s.to_json() for s in listed])
    elif listed:
        table(_endpoint_rows(listed))
    else:
        print("no subscriptions (subscribe: interchange actor subscribe SELECTOR)")
    return 0


async def subscriptions_delete(args: argparse.Namespace) -> int:
    async with _actor(args) as actor:
        await actor.api.delete_subscription(args.id)
    print(f"subscription {args.id} deleted")
    return 0


# -------------------------------------------------------------------------------- check-selector
def _print_overlap(result: Overlap, against: str, *, verbose: bool = True, out: Any = None) -> None:
    out = out or sys.stderr  # looked up now: a caller may have replaced it
    print(f"against {against}: {result.summary()}", file=out)
    if verbose:
        for verdict in result.verdicts:
            print(f"  {verdict.describe()}", file=out)


def _capabilities_file(path: Path) -> list[Capability]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ActorError(f"cannot read {path}: {exc}") from None
    documents = data.get("capabilities") if isinstance(data, dict) else data
    if not isinstance(documents, list):
        raise ActorError(f"{path}: expected a list of capabilities, or {{\"capabilities\": [...]}}")
    return [Capability.model_validate(d.get("definition", d) if isinstance(d, dict) else d) for d in documents]


async def check_selector(args: argparse.Namespace) -> int:
    problem = parse_selector(args.selector)
    if problem is not None:
        print(problem.message)
        print(problem.pointer())
        print("the node would answer NOT_VALID")
        return 1
    print("valid: the node's parser accepts it")
    if args.capabilities is not None:
        result = overlap(args.selector, _capabilities_file(args.capabilities))
        _print_overlap(result, str(args.capabilities), out=sys.stdout)
        return 0 if result.any else 1
    if args.against == "none":
        return 0
    async with _actor(args) as actor:
        result = await actor.check_selector(args.selector, against=args.against)
    _print_overlap(result, "your capabilities" if args.against == "mine" else "the federation's capabilities",
                   out=sys.stdout)
    return 0 if result.any else 1

