"""The options of ``audit match`` (no pyspark: :mod:`spark.cli` builds the parser without it)."""
from __future__ import annotations

import argparse

from spark.replay_args import epoch_ms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The match job's own options (``spark.cli`` adds --input, --output, --master, --conf)."""
    parser.add_argument("--selector", required=True, help="the JMS selector of the subscription (the broker's dialect)")
    parser.add_argument("--from", dest="start", type=epoch_ms, metavar="TIME",
                        help="arrivals at or after TIME (ISO-8601, UTC by default, or epoch ms)")
    parser.add_argument("--until", type=epoch_ms, metavar="TIME", help="arrivals before TIME")
    parser.add_argument("--examples", type=int, default=3, help="message ids shown per group (default 3)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
