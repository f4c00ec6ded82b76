"""``interchange actor publish`` and ``listen``: the Basic Interface from the command line."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ii_api.wire.models import LocalEndpoint, LocalSubscription
from interchange.actor.amqp import Listener
from interchange.actor.areas import parse_area, parse_point
from interchange.actor.client import Actor
from interchange.actor.commands import actor_from_args, area_flags
from interchange.actor.errors import ActorError
from interchange.actor.output import MESSAGE_COLUMNS, Progress, message_json, message_line, message_row, save_message
from interchange.actor.properties import OutgoingMessage, message_properties

__all__ = ["add_listen_command", "add_publish_command", "listen", "publish"]


# --------------------------------------------------------------------------------------- publish
def add_publish_command(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--type", dest="message_type", help="messageType: DENM, IVIM, SPATEM, MAPEM, SREM, SSEM, CPM, "
                        "POIM-PA, CAM")
    parser.add_argument("--publisher-id", help="publisherId, e.g. NL00001")
    parser.add_argument("--publication-id", help="publicationId (publisherId: is put in front of a bare id)")
    parser.add_argument("--protocol-version", help="protocolVersion, e.g. DENM:1.3.1")
    parser.add_argument("--country", help="originatingCountry (default: the publisherId's letters)")
    parser.add_argument("--position", metavar="LAT,LON", help="the reference position: latitude, longitude and "
                        "its zoom-18 quadTree tile (IP_038)")
    area_flags(parser)
    parser.add_argument("--shard-id", type=int)
    parser.add_argument("--shard-count", type=int)
    parser.add_argument("--cause-code", type=int)
    parser.add_argument("--sub-cause-code", type=int)
    parser.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                        help="any other property (VALUE read as JSON when it is a number, else text); repeat")
    parser.add_argument("--properties", type=Path, metavar="FILE", help="a JSON object of properties (flags win)")
    parser.add_argument("--body", help="the body, as text (UTF-8)")
    parser.add_argument("--body-file", metavar="FILE", help="the body, from a file (- for stdin)")
    parser.add_argument("--ttl-ms", type=int, help="TTL in ms (default: IP_033, the repetition interval x 1.2)")
    parser.add_argument("--non-durable", action="store_true", help="not stored by the broker (default: durable)")
    parser.add_argument("--repeat", type=float, metavar="SECONDS", help="publish again every SECONDS (IP_048); "
                        "the TTL is then SECONDS x 1.2")
    parser.add_argument("--times", type=int, help="with --repeat: how many copies in all (default: until Ctrl-C)")
    parser.add_argument("--delivery", metavar="ID", help="publish through this delivery (default: the first "
                        "CREATED one whose selector the message fits, else a new one covering all)")
    parser.add_argument("--dry-run", action="store_true", help="build and check, print, do not send")


def _typed(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else text


def _file_properties(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ActorError(f"cannot read the properties {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ActorError(f"{path}: expected a JSON object of properties")
    return data


def properties_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The properties of the file, those the flags build, then each --property."""
    base = _file_properties(args.properties)
    message_type = args.message_type or base.get("messageType")
    publisher_id = args.publisher_id or base.get("publisherId")
    if not message_type or not publisher_id:
        raise ActorError("the message type and publisherId are needed", "give --type and --publisher-id (or "
                         "messageType and publisherId in --properties)")
    built = message_properties(
        message_type=message_type, publisher_id=publisher_id,
        publication_id=args.publication_id or base.get("publicationId"),
        protocol_version=args.protocol_version or base.get("protocolVersion"),
        originating_country=args.country or base.get("originatingCountry"),
        position=parse_point(args.position) if args.position else None,
        area=parse_area(point=args.point, radius_m=args.radius, polygon=args.polygon, tiles=args.tiles),
        shard_id=args.shard_id, shard_count=args.shard_count, cause_code=args.cause_code,
        sub_cause_code=args.sub_cause_code)
    extra = {}
    for item in args.property:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ActorError(f"--property {item!r}", "write NAME=VALUE")
        extra[name] = _typed(value)
    return {**base, **built, **extra}


def _body(args: argparse.Namespace) -> bytes:
    if args.body is not None and args.body_file is not None:
        raise ActorError("--body and --body-file both give the body", "give one")
    if args.body is not None:
        return str(args.body).encode()
    if args.body_file == "-":
        return sys.stdin.buffer.read()
    if args.body_file is not None:
        try:
            return Path(args.body_file).read_bytes()
        except OSError as exc:
            raise ActorError(f"cannot read the body {args.body_file}: {exc.strerror or exc}") from None
    raise ActorError("no body", "give --body TEXT, --body-file FILE or --body-file - (stdin)")


def _outcome_line(index: int, outcome: Any) -> None:
    print(f"{index}: {'accepted' if outcome.accepted else 'REJECTED: ' + str(outcome.reason)}", flush=True)


async def publish(args: argparse.Namespace) -> int:
    repeat_ms = round(args.repeat * 1000) if args.repeat else None
    message = OutgoingMessage.build(properties_from_args(args), _body(args), ttl_ms=args.ttl_ms,
                                    repeat_every_ms=repeat_ms, durable=not args.non_durable)
    if args.dry_run:
        print(json.dumps({"properties": dict(message.properties), "ttl_ms": message.ttl_ms,
                          "durable": message.durable, "bytes": len(message.body)}, indent=2))
        return 0
    async with actor_from_args(args) as actor:
        delivery = await actor.api.delivery(args.delivery) if args.delivery else \
            await actor.delivery_for(message.properties)
        print(f"publishing through delivery {delivery.id} ({delivery.selector!r}), TTL {message.ttl_ms} ms, "
              f"{'durable' if message.durable else 'not durable'}", file=sys.stderr)
        if args.repeat:
            outcomes = await actor.repeat(message, args.repeat, times=args.times, delivery=delivery,
                                          on_outcome=_outcome_line)
        else:
            outcomes = [await actor.publish(message, delivery)]
            _outcome_line(1, outcomes[0])
    return 0 if all(o.accepted for o in outcomes) else 1


# ---------------------------------------------------------------------------------------- listen
def add_listen_command(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("subscription", nargs="?", metavar="ID", help="the subscription (default: your only "
                        "CREATED one)")
    parser.add_argument("--source", help="listen to this source address instead (with --bi)")
    parser.add_argument("--bi", metavar="HOST:PORT", help="the node's AMQPS endpoint for --source")
    parser.add_argument("--selector", help="an AMQP selector filter on the link, on top of the subscription's")
    parser.add_argument("--count", type=int, help="stop after this many messages")
    parser.add_argument("--follow", action="store_true", help="keep listening when no message comes")
    parser.add_argument("--idle", type=float, default=10.0, metavar="S", help="without --follow, stop after S "
                        "seconds without a message (default 10)")
    parser.add_argument("--json", action="store_true", help="one JSON object per message")
    parser.add_argument("--save", type=Path, metavar="DIR", help="write each message's body and properties there")
    parser.add_argument("--credit", type=int, default=100, help="most messages in flight unsettled (flow control)")
    parser.add_argument("--progress", type=float, default=10.0, metavar="S", help="a progress line on stderr every "
                        "S seconds (0: none)")


async def _endpoint(actor: Actor, args: argparse.Namespace) -> LocalSubscription | LocalEndpoint:
    if args.source:
        host, sep, port = (args.bi or "").rpartition(":")
        if not sep or not port.isdigit():
            raise ActorError("--source needs the node's AMQPS endpoint", "give --bi HOST:PORT")
        return LocalEndpoint(host=host, port=int(port), source=args.source)
    if args.subscription:
        return await actor.api.subscription(args.subscription)
    created = [s for s in await actor.api.subscriptions() if s.status.value == "CREATED" and s.endpoints]
    if len(created) != 1:
        ids = ", ".join(s.id for s in created) or "none"
        raise ActorError(f"{len(created)} CREATED subscriptions ({ids})",
                         "name one: interchange actor listen ID" if created else "subscribe first")
    return created[0]


async def _receive(listener: Listener, args: argparse.Namespace) -> int:
    progress = Progress(args.progress)
    count = 0
    if not args.json:
        print(message_line(MESSAGE_COLUMNS), flush=True)
    while args.count is None or count < args.count:
        try:
            message = await listener.next(None if args.follow else args.idle)
        except TimeoutError:
            break
        count += 1
        if args.save is not None:
            save_message(args.save, count, message)
        if args.json:
            print(json.dumps(message_json(message)), flush=True)
        else:
            print(message_line(message_row(count, message)), flush=True)
        message.accept()
        progress.tick(count)
    return count


async def listen(args: argparse.Namespace) -> int:
    async with actor_from_args(args) as actor:
        endpoint = await _endpoint(actor, args)
        listener = await actor.listen(endpoint, credit=args.credit, selector=args.selector)
        count = await _receive(listener, args)
    print(f"received {count} message{'s' if count != 1 else ''}" + (f" in {args.save}" if args.save else ""),
          file=sys.stderr)
    return 0 if args.count is None or count >= args.count else 1
