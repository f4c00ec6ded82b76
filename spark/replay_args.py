"""The options of ``audit replay`` (no pyspark: :mod:`spark.cli` builds the parser without it)."""
from __future__ import annotations

import argparse
import datetime as dt

from interchange.ground.errors import CliError
from interchange.ground.logformat import iso_ms

#: Filters on the slice: argument name -> column of spark.tables.MESSAGES.
FILTERS = {"node": "node", "publisher": "publisher", "publisher_id": "publisherId",
           "message_type": "messageType", "publication_id": "publicationId"}


def epoch_ms(text: str) -> int:
    """``--from``/``--until``: ISO-8601 (UTC unless it says otherwise) or epoch milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time or epoch milliseconds: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The replay job's own options (``spark.cli`` adds --input, --output, --master, --conf)."""
    chosen = parser.add_argument_group("the slice (received_message records)")
    chosen.add_argument("--from", dest="start", type=epoch_ms, metavar="TIME",
                        help="arrivals at or after TIME (ISO-8601, UTC by default, or epoch ms)")
    chosen.add_argument("--until", type=epoch_ms, metavar="TIME", help="arrivals before TIME")
    for option in FILTERS:
        chosen.add_argument(f"--{option.replace('_', '-')}", action="append", metavar="VALUE",
                            help=f"only this {FILTERS[option]} (repeatable)")
    chosen.add_argument("--limit", type=int, help="at most this many messages (the first by arrival)")
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=_positive, default=1.0,
                      help="the logged inter-arrival times divided by this factor (default 1: as logged)")
    pace.add_argument("--fast", action="store_true", help="as fast as the node gives credit")
    to = parser.add_argument_group("where to publish (as a C-ITS actor: mutual TLS 1.3, SASL EXTERNAL)")
    to.add_argument("--broker", metavar="HOST:PORT", help="the node's AMQPS listener")
    to.add_argument("--server-name", help="the node's certificate name (default: HOST)")
    to.add_argument("--identity", metavar="DIR", help="the actor's identity directory (chain.pem, key.pem, trust.pem)")
    to.add_argument("--trust", metavar="PEM", help="trust bundle (default: DIR/trust.pem)")
    to.add_argument("--pki", metavar="DIR", help="a PKI made by `interchange pki` (with --cn)")
    to.add_argument("--cn", help="the actor's certificate name in --pki")
    to.add_argument("--target", metavar="ADDRESS", help="publish everything to this target (default: as logged)")
    to.add_argument("--timeout", type=_positive, default=10.0,
                    help="seconds to wait for the connection, an attach, credit, the last outcomes (default 10)")
    parser.add_argument("--dry-run", action="store_true", help="list the plan, publish nothing")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def check_range(args: argparse.Namespace) -> None:
    """Refuse a contradictory slice before any work: ``--from`` at or after ``--until`` selects nothing."""
    if args.start is not None and args.until is not None and args.start >= args.until:
        raise CliError(f"--from {iso_ms(args.start)} is not before --until {iso_ms(args.until)}: "
                       "the slice is empty (arrivals at or after --from and before --until)")
