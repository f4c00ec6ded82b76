"""The commands that read a node's config file.

    interchange broker --config FILE                  run the node until interrupted
    interchange subscriptions --config FILE [--json]  the II's subscriptions, read-only (ii_api.node.cli)
    interchange monitoring-targets --config FILE [--host H]  Prometheus file_sd targets of the node's processes
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from ii_api.node.cli import format_subscriptions, read_subscriptions
from interchange.app.config import load_config
from interchange.app.node import run_forever
from interchange.app.node_metrics import scrape_targets
from interchange.ground.errors import CliError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "broker", help="run the AMQP 1.0 Basic Interface broker",
        description="Run the node's AMQP 1.0 broker (TLS 1.3, client certificates) from a config file.")
    parser.add_argument("--config", required=True, type=Path, help="node config file (TOML or JSON)")
    parser.set_defaults(handler=run)

    subscriptions = subparsers.add_parser(
        "subscriptions", help="list the II's subscriptions and deliveries of a node (read-only)",
        description="Print the subscriptions of neighbours at this interchange (IP_078), this interchange's "
                    "subscriptions at neighbours (IP_079), and the local actors' subscriptions and deliveries, "
                    "from the II database in the node's data directory. Read-only: safe while the node runs.")
    subscriptions.add_argument("--config", required=True, type=Path, help="node config file (TOML or JSON)")
    subscriptions.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    subscriptions.set_defaults(handler=run_subscriptions)

    targets = subparsers.add_parser(
        "monitoring-targets", help="print the Prometheus scrape targets of a node's broker processes",
        description="Print the file-based service discovery entries (JSON, which is also YAML) for every broker "
                    "process of the node: admin port + k, labelled node and process. Save the output as "
                    "deploy/monitoring/targets/nodes/<node>.yml (see docs/monitoring.md).")
    targets.add_argument("--config", required=True, type=Path, help="node config file (TOML or JSON)")
    targets.add_argument("--host", help="the address Prometheus reaches the admin endpoint at "
                                        "(default: admin.host, or the node's name when that is a wildcard)")
    targets.set_defaults(handler=run_monitoring_targets)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        asyncio.run(run_forever(config, load_config=lambda: load_config(args.config)))
    except (OSError, ValueError) as exc:  # start_node stopped whatever had started (one exit stack)
        raise CliError(f"node start-up failed, nothing is left running: {exc}") from None
    return 0


def run_subscriptions(args: argparse.Namespace) -> int:
    """``interchange subscriptions``: the II's subscriptions of the configured node, read-only."""
    config = load_config(args.config)
    report = read_subscriptions(config.name, config.data_dir)
    print(report.model_dump_json(indent=2) if args.json else format_subscriptions(report))
    return 0


def run_monitoring_targets(args: argparse.Namespace) -> int:
    """``interchange monitoring-targets``: file_sd entries for the node's admin ports."""
    config = load_config(args.config)
    if not config.admin.port:
        raise CliError("admin.port is not set to a fixed port: Prometheus needs one to scrape (port + k per process)")
    host = args.host or (config.name if config.admin.host in ("0.0.0.0", "::", "") else config.admin.host)
    print(json.dumps(scrape_targets(config.name, host, config.admin.port, config.broker.processes), indent=2))
    return 0
