"""``interchange audit <job>``: the Spark pipeline's jobs on the command line (and under spark-submit).

    interchange audit ingest   --input LOGS... --output DIR [--master URL]
    interchange audit validate --input DIR|LOGS... --output DIR [--master URL] [--metrics-file PATH.prom]
    interchange audit stream   --input LOGDIR --output DIR [--available-now] [--master URL]
    interchange audit report   --input DIR|LOGS... --output REPORT.html
    interchange audit replay   --input LOGS...|DIR [slice] (--broker HOST:PORT --pki DIR --cn CN | --dry-run)
    interchange audit match    --input DIR|LOGS... --selector "JMS selector" [--from T] [--until T]

This module does not import pyspark: the node's command line loads it without the ``[spark]``
extra, and a job is imported (:func:`importlib.import_module`) only when it runs. Each job module
has ``run(spark, args) -> int``; :data:`JOBS` is the dispatch table (other jobs add an entry).
``spark-submit spark/submit.py <job> ...`` runs the same jobs with spark-submit's master.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from interchange.ground.errors import CliError
from spark import match_args, replay_args


@dataclass(frozen=True)
class Job:
    """One audit job: its module (with ``run(spark, args) -> int``), help, and its own arguments."""

    module: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    output_help: str = "output root of the pipeline's tables"
    output_required: bool = True
    #: checks of the arguments alone, run before Spark starts (a refusal costs no session)
    check: Callable[[argparse.Namespace], None] | None = None


def _ingest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=("overwrite", "append"), default="overwrite",
                        help="replace the messages/events/corrupt tables (default) or add to them")


def _validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-id", help="name of this run in the violations and rule_metrics history "
                                         "(default: a UTC timestamp)")
    parser.add_argument("--metrics-file", metavar="PATH", help="also write the run's findings per rule and severity "
                        "as a Prometheus textfile-collector file (name it *.prom)")


def _stream_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval (default 1 s)")
    parser.add_argument("--available-now", action="store_true",
                        help="process the files present now, then stop (resumes from the checkpoint next time)")
    parser.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--max-files-per-trigger", type=int, default=None)


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--top", type=int, default=10, help="rows of the ranked tables (default 10)")
    parser.add_argument("--from", dest="start", type=replay_args.epoch_ms, metavar="TIME",
                        help="records and findings at or after TIME (ISO-8601, UTC by default, or epoch ms)")
    parser.add_argument("--until", type=replay_args.epoch_ms, metavar="TIME", help="records and findings before TIME")
    parser.add_argument("--title", default="C-Roads interchange audit report", help="the page's title")


JOBS: dict[str, Job] = {
    "ingest": Job("spark.ingest", "JSON-lines logs to Parquet (messages, events, corrupt lines)", _ingest_arguments),
    "validate": Job("spark.validate", "check the log against the profile's rules; append violations and rule metrics",
                    _validate_arguments),
    "stream": Job("spark.stream", "validate the rotated log directory continuously (Structured Streaming)",
                  _stream_arguments),
    "report": Job("spark.report", "one self-contained HTML report for governance readers (charts inline; "
                  "every finding in a CSV beside it)", _report_arguments, output_help="the report's HTML file",
                  check=replay_args.check_range),
    "match": Job("spark.match", "what a subscription with a JMS selector would have received in a period (what-if)",
                 match_args.add_arguments,
                 output_help="also write the summary (JSON) to this file", output_required=False,
                 check=replay_args.check_range),
    "replay": Job("spark.replay", "publish a slice of the log again through a node's BI, as a C-ITS actor",
                  replay_args.add_arguments, output_help="also write the summary (JSON) to this file",
                  output_required=False, check=replay_args.check_range),
}


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _add_job(sub: Any, name: str, job: Job) -> None:
    parser = sub.add_parser(name, help=job.help, description=job.help)
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH",
                        help="log files, directories, globs (or, for validate and replay, an ingest output directory)")
    parser.add_argument("--output", required=job.output_required, metavar="PATH", help=job.output_help)
    parser.add_argument("--master", default=None,
                        help="Spark master URL (default local[*]; under spark-submit, spark-submit's)")
    parser.add_argument("--conf", action="append", type=_conf_pair, default=[], metavar="KEY=VALUE",
                        help="extra Spark setting (repeatable)")
    job.add_arguments(parser)
    parser.set_defaults(handler=run, job=name)


def add_jobs(parser: argparse.ArgumentParser) -> None:
    jobs = parser.add_subparsers(dest="job", metavar="JOB", required=True)
    for name, job in JOBS.items():
        _add_job(jobs, name, job)


def register(subparsers: Any) -> None:
    audit = subparsers.add_parser(
        "audit", help="Spark audit pipeline over the node's JSON logs (needs the [spark] extra)",
        description="Ingest, validate and stream the node's JSON-lines logs with PySpark "
                    "(local[*] by default, --master for a cluster).",
    )
    add_jobs(audit)


def run(args: argparse.Namespace) -> int:
    """Run ``args.job`` in a SparkSession (stopped afterwards if this call started it)."""
    check = JOBS[args.job].check
    if check is not None:
        check(args)
    try:
        job = importlib.import_module(JOBS[args.job].module)
        session_module = importlib.import_module("spark.session")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("pyspark", "py4j"):
            raise
        raise CliError("pyspark is not installed: install the node with its spark extra, "
                       "pip install 'croads-interchange[spark]' (and Java 17)") from None
    spark, created = session_module.open_session(args.master, f"interchange-audit-{args.job}", dict(args.conf))
    try:
        return int(job.run(spark, args))
    finally:
        if created:  # a session the caller already had (tests, notebooks) stays theirs
            spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """The audit jobs alone (``spark-submit spark/submit.py <job> ...``)."""
    parser = argparse.ArgumentParser(prog="audit", description="interchange audit jobs")
    add_jobs(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except CliError as exc:
        print(f"audit {args.job}: error: {exc}", file=sys.stderr)
        return 2
