"""The `interchange` command: one CLI, one subcommand per concern.

Each package that offers commands exposes ``register(subparsers)``, which adds
its subparser and sets ``handler=<callable(args) -> int>`` as a default (the kit's ``interop`` is
also given the shell's :func:`~interchange.app.selfnode.start_self`, which it cannot import). Errors
meant for the user are raised as :class:`CliError` (or the user-facing error of a lower package,
:data:`USER_ERRORS`) and printed as one line without a traceback.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from certs import cli as certs_cli
from certs.errors import PkiError
from ii_api.node import cli as ii_cli
from interchange.actor import cli as actor_cli
from interchange.actor.errors import ActorError
from interchange.app import demo, node_cli, selfnode, tlex_demo
from interchange.bridges.tlex import sim_cli as tlex_sim_cli
from interchange.ground import profile
from interchange.ground.errors import CliError
from interop_kit import cli as interop_cli
from interop_kit import federation_cli
from quadtree import cli as quadtree_cli
from quadtree.errors import QuadtreeUsageError
from spark import cli as spark_cli

#: Errors written for the user: printed as one line, exit status 2 (``certs`` and ``quadtree`` have
#: their own: they sit beside and below :mod:`interchange.ground` and do not import it; the actors'
#: library has one that says what to do).
USER_ERRORS = (CliError, PkiError, QuadtreeUsageError, ActorError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="interchange",
        description="C-Roads interchange node (Basic Interface broker, Improved Interface, tools)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    quadtree_cli.register(sub, point_zoom=profile.REFERENCE_ZOOM, circle_zoom=profile.EVENT_AREA.zoom)
    certs_cli.register(sub)
    node_cli.register(sub)
    demo.register(sub)
    ii_cli.register(sub)
    actor_cli.register(sub)
    spark_cli.register(sub)
    tlex_sim_cli.register(sub)
    tlex_demo.register(sub)
    interop_cli.register(sub, selfnode.start_self)
    federation_cli.register(sub)
    for subparser in sub.choices.values():  # so that its own usage explains a wrong argument
        subparser.set_defaults(command_parser=subparser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would print the top-level usage, which does not list the command's options
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.handler(args) or 0)
    except USER_ERRORS as exc:
        print(f"interchange {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
