"""``interchange federation up|down|status`` (see :mod:`interop_kit.federation`)."""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from interchange.ground.errors import CliError
from interop_kit.federation import FederationError, all_up, down, kit_command, load_state, status_rows, up


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("federation", help="start, inspect or stop a local test federation for the interop kit",
                                   description=__doc__)
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--dir", type=Path, default=Path("federation"), help="working directory (default federation)")
    parser.add_argument("--nodes", type=int, default=3, help="number of interchanges (up; default 3)")
    parser.add_argument("--domain", default="federation.test", help="trusted domain (up; default federation.test)")
    parser.add_argument("--prefix", default="127.0.10", help="node k listens on <prefix>.<k> (up; default 127.0.10)")
    parser.add_argument("--ii-port", type=int, default=8443, help="II port on every node (up; default 8443)")
    parser.add_argument("--amqps-port", type=int, default=5671, help="AMQPS port on every node (up; default 5671)")
    parser.add_argument("--isolation", choices=("auto", "netns", "loopback"), default="auto",
                        help="each node in its own network namespace (netns, needs root), on its own loopback "
                             "address (loopback), or netns where possible (auto, the default)")
    parser.set_defaults(handler=main)


def _print_status(directory: Path) -> int:
    state = load_state(directory.resolve())
    print(f"federation in {state.directory}: {state.mode}")
    widths = [max(len(row[i]) for row in status_rows(state)) for i in range(4)]
    for row in status_rows(state):
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0 if all_up(state) else 1


def main(args: argparse.Namespace) -> int:
    try:
        if args.action == "up":
            state = up(args.dir, args.nodes, domain=args.domain, prefix=args.prefix, ii_port=args.ii_port,
                       amqps_port=args.amqps_port, isolation=args.isolation)
            code = _print_status(args.dir)
            print("check node 1 with the interop kit:\n  " + shlex.join(kit_command(state, state.nodes[0])))
            return code
        if args.action == "down":
            down(args.dir)
        return _print_status(args.dir)
    except (FederationError, OSError) as exc:
        raise CliError(str(exc)) from None
