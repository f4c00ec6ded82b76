"""`interchange broker --config FILE`: run a node's Basic Interface broker until interrupted."""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from interchange.errors import CliError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "broker", help="run the AMQP 1.0 Basic Interface broker",
        description="Run the node's AMQP 1.0 broker (TLS 1.3, client certificates) from a config file.")
    parser.add_argument("--config", required=True, type=Path, help="node config file (TOML or JSON)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from interchange.config import load_config
    from interchange.node import run_forever

    config = load_config(args.config)
    try:
        asyncio.run(run_forever(config))
    except (OSError, ValueError) as exc:  # start_node stopped whatever had started (one exit stack)
        raise CliError(f"node start-up failed, nothing is left running: {exc}") from None
    return 0
