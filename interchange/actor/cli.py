"""``interchange actor ...``: the actor's command line, a thin layer over :mod:`interchange.actor`.

Settings come from ``--config FILE`` (else ``$INTERCHANGE_ACTOR_CONFIG``, else ``./actor.toml``),
each value overridable by a flag. Every failure is one line saying what to do (an
:class:`~interchange.actor.errors.ActorError` becomes the shell's ``CliError``), never a traceback.
Exit status: 0 done, 1 the node said no (a rejected message, a refused selector, no overlap),
2 a usage or connection error, 130 interrupted.
"""
from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from interchange.actor import bi_commands, commands
from interchange.actor.commands import CONFIG_ENV, DEFAULT_CONFIG
from interchange.actor.errors import ActorError
from interchange.ground.errors import CliError

__all__ = ["register", "run"]

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection (override the settings file)")
    group.add_argument("--config", metavar="FILE", help=f"settings file, TOML or JSON (default ${CONFIG_ENV}, "
                       f"else ./{DEFAULT_CONFIG})")
    group.add_argument("--node", help="the interchange's name (its certificate's CN)")
    group.add_argument("--ii-url", help="https://host:port of its II")
    group.add_argument("--domain", help="find the node in DNS: the SRV records of _ixc._tcp.DOMAIN")
    group.add_argument("--dns-server", help="the DNS server to ask (an IP address)")
    group.add_argument("--dns-port", type=int, help="its port (default 53)")
    group.add_argument("--cert", type=Path, help="your certificate chain (PEM)")
    group.add_argument("--key", type=Path, help="your private key (PEM)")
    group.add_argument("--trust", type=Path, help="the trust bundle (PEM)")
    group.add_argument("--crl", type=Path, action="append", help="a CRL (repeat for several)")
    group.add_argument("--timeout", type=float, help="seconds per request (default 10)")
    return common


def _add(sub: Any, name: str, command: Command, common: argparse.ArgumentParser, help_text: str,
         **kwargs: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text, description=help_text,
                                                     **kwargs)
    parser.set_defaults(actor_command=command)
    return parser


def register(subparsers: Any) -> None:
    """Add ``actor`` and its commands to the ``interchange`` command line."""
    parser = subparsers.add_parser("actor", help="a C-ITS actor's client: capabilities, subscriptions, publish, "
                                   "listen (docs/actors.md)", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="actor_action", metavar="ACTION", required=True)
    common = _common()
    _add(sub, "whoami", commands.whoami, common, "the identity the node sees, and what it may do").add_argument(
        "--json", action="store_true")
    commands.add_capability_commands(sub, _add, common)
    commands.add_delivery_commands(sub, _add, common)
    commands.add_subscription_commands(sub, _add, common)
    bi_commands.add_publish_command(_add(sub, "publish", bi_commands.publish, common,
                                      "publish a message through a delivery (properties of tables 1-7 from flags "
                                      "or a JSON file, checked with the node's rules)"))
    bi_commands.add_listen_command(_add(sub, "listen", bi_commands.listen, common,
                                     "receive a subscription's messages (or a source's)"))
    checking = _add(sub, "check-selector", commands.check_selector, common,
                    "check a selector: the node's parser (offline), then the capabilities it matches")
    checking.add_argument("selector")
    checking.add_argument("--against", choices=("network", "mine", "none"), default="network",
                          help="match it against the federation's capabilities (default), your own (a delivery's "
                               "view), or nothing (parse only)")
    checking.add_argument("--capabilities", type=Path, metavar="FILE",
                          help="match against the capabilities in this JSON file instead (no network)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    command: Command = args.actor_command
    try:
        return asyncio.run(command(args))
    except ActorError as exc:
        raise CliError(str(exc)) from None
    except (KeyboardInterrupt, CliError):
        raise
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback; this is a bug of ours
        raise CliError(f"unexpected {type(exc).__name__}: {exc} (a bug of `interchange actor`: please report it "
                       "with the command line)") from None
