"""``audit ingest``: JSON-lines logs to Parquet tables partitioned by node and date (IP_009/010/121, appendix F).

Input: files, directories (every file in them, e.g. the rotated ``*.jsonl`` and the active log),
globs, from several nodes, log schema versions 1 and 2. Output (:mod:`spark.tables`): ``messages``
and ``events`` partitioned by ``node`` and ``date`` with epoch-ms columns and the source ``file`` of
every row, and ``corrupt``: lines that are not records (truncated, malformed) with file and reason.
A bad line is never fatal. Each line is read and parsed once, in the messages write's job: the rows that
are not messages (a few) are kept aside on the way for the events and corrupt writes.
Within a node and date the messages are written clustered (:data:`CLUSTERED_BY`), so that a job
reading some events or message types skips the Parquet pages of the others.
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from interchange.ground.errors import CliError
from spark import parse, tables
from spark.session import settings
from spark.tables import Layout

#: The order of the messages within a node and date. Parquet keeps each page's lowest and highest
#: value (its column index), so a filter on these columns skips the pages of other rows: validate's
#: frames read only the received messages, the deliveries, or the MAPEMs and SPATEMs (at 2M lines
#: 1.1M rows scanned instead of 2M for the table checks, ~2.5 s less task CPU per validate), replay
#: the received messages and their MAPEMs. The write sorts by node and date anyway: no extra pass.
CLUSTERED_BY = ("event", "messageType", "timestampMs")

_REMOTE = ("hdfs://", "s3a://", "s3://", "gs://", "abfs://", "abfss://", "file:/")


def resolve_inputs(inputs: Sequence[str]) -> list[str]:
    """Local files, directories and globs -> the files to read (sorted); other URIs are passed to Spark."""
    files: list[str] = []
    for item in inputs:
        if item.startswith(_REMOTE):
            files.append(item)
        elif os.path.isdir(item):
            found = sorted(os.path.join(item, name) for name in os.listdir(item)
                           if os.path.isfile(os.path.join(item, name)) and not name.startswith("."))
            files += found
        elif os.path.isfile(item):
            files.append(item)
        else:
            matches = sorted(path for path in glob.glob(item) if os.path.isfile(path))
            if not matches:
                raise CliError(f"no log files at {item!r}")
            files += matches
    if not files:
        raise CliError("no log files to read")
    return [os.path.abspath(path) if "://" not in path and not path.startswith("file:") else path
            for path in files]


def read_lines(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """One row per non-blank line: ``value`` and the ``file`` it came from."""
    lines = (spark.read.option("lineSep", LINE_SEPARATOR).text(list(files))
             .select(F.col("value"), F.col("_metadata.file_path").alias("file")))
    return lines.where(not_blank(F.col("value")))


#: Lines end at a line feed only (the node writes "\n"): a carriage return inside a line is part of
#: it (JSON whitespace), not a line break of its own.
LINE_SEPARATOR = "\n"


def not_blank(value: Column) -> Column:
    """A line with something but spaces, tabs and carriage returns on it."""
    # a record starts with "{": no trimmed copy of it. ltrim stops at the first other character: btrim with a
    # trim string walks the whole line and allocates two int arrays of its length
    return value.startswith("{") | (F.ltrim(value, F.lit(" \t\r")) != "")


#: Spark's default largest input split (``spark.sql.files.maxPartitionBytes``).
MAX_SPLIT_BYTES = 128 * 1024 * 1024


def split_bytes(total: int, cores: int, largest: int = MAX_SPLIT_BYTES) -> int:
    """The input split size that gives every core the same number of equal tasks, none over ``largest``.

    Spark cuts a 448 MiB log into 128, 128, 128 and 64 MiB: on 2 cores the last round ran one task beside
    one of half its size, a core idle for half of it; 4 x 112 MiB keep both busy to the end."""
    tasks = cores * max(1, math.ceil(total / (cores * largest)))
    return max(1, math.ceil(total / tasks))


@contextmanager
def balanced_splits(spark: SparkSession, files: Sequence[str]) -> Iterator[None]:
    """Within the block, scans of ``files`` (local ones sized; others left to Spark) split by :func:`split_bytes`."""
    sizes = [os.path.getsize(path) for path in files if "://" not in path and not path.startswith("file:")]
    split = split_bytes(sum(sizes), spark.sparkContext.defaultParallelism) if sizes else None
    with settings(spark, {} if split is None else {"spark.sql.files.maxPartitionBytes": str(split)}):
        yield


def read_records(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """Parsed lines (:func:`spark.parse.parse`) of the given logs."""
    return parse.parse(read_lines(spark, resolve_inputs(inputs)))


@dataclass(frozen=True)
class IngestSummary:
    messages: int
    events: int
    corrupt: int

    def __str__(self) -> str:
        return f"{self.messages} message records, {self.events} other events, {self.corrupt} corrupt lines"


#: Parquet writer settings of the ingested tables (standard Parquet: only what the writer spends CPU on).
#: - no dictionary for the columns that are (nearly) unique per row: the writer builds a dictionary for
#:   every column and falls back to plain values once it outgrows a page, after hashing and comparing
#:   each value (dictionaries were ~10 % of a warm ingest's JFR samples at 500,000 lines, all columns);
#:   the repeating columns keep theirs;
#: - no page checksums. Min/max statistics and the column index (validate's page skipping) are kept;
#: - size statistics (the per-page histograms of parquet-mr 1.15+: nothing here reads them) are asked off,
#:   but parquet-mr 1.17's output format does not hand that setting to its writer (it has no
#:   ``withSizeStatisticsEnabled`` call): they are still built, ~5 % of a warm ingest's task samples. A Parquet
#:   format of our own whose writer turns them off gave no measurable gain (docs/performance.md): not used.
WRITE_OPTIONS: dict[str, str] = {
    "parquet.size.statistics.enabled": "false",
    "parquet.page.write-checksum.enabled": "false",
    **{f"parquet.enable.dictionary#{name}": "false" for name in (
        "timestampMs", "messageId", "amqpMessageId", "shardKey", "shardSeq", "arrivalMs", "departureMs",
        "settledMs", "bodySha256", "expiryMs", "bodyContentHex", "rawMessageHex")},
}


def _write(frame: DataFrame, mode: str, path: str, partitioned: bool = True) -> int:
    """Writes ``frame`` to ``path``; returns the rows written (counted on the way, by the write's own job)."""
    rows = Observation()
    writer = frame.observe(rows, F.count(F.lit(1)).alias("rows")).write.mode(mode).options(**WRITE_OPTIONS)
    (writer.partitionBy("node", "date") if partitioned else writer).parquet(path)
    return int(rows.get["rows"])


#: The bytes of rows that are not messages (events and corrupt lines) each task of the messages write may keep
#: aside for the driver, and the driver in all (:func:`spark.parse.message_rows`): a node's log has a few
#: (connections, links, II events); over either (a log of mostly other records, or of garbage) they are read
#: again. The driver's budget bounds its memory whatever the number of tasks.
ASIDE_BYTES_PER_TASK = 8 * 1024 * 1024
ASIDE_BYTES_IN_DRIVER = 64 * 1024 * 1024


def ingest(spark: SparkSession, inputs: Sequence[str], output: str, mode: str = "overwrite",
           aside_bytes: tuple[int, int] = (ASIDE_BYTES_PER_TASK, ASIDE_BYTES_IN_DRIVER)) -> IngestSummary:
    """Write the three tables of ``inputs`` under ``output``; returns the row counts written.

    One pass over the lines: each is parsed once into its row (:func:`spark.parse.message_rows`), the messages
    (nearly every row) go to their write, and the rows that are not messages are kept aside on the way (up to
    ``aside_bytes``: a task's, the driver's) for the two small writes. Only when they were more than that are
    the lines read and parsed again for them."""
    layout = Layout(output)
    if mode == "append" and (version := messages_layout(spark, layout.messages)) != tables.LAYOUT_VERSION:
        raise CliError(f"{layout.messages} was written by an earlier ingest (layout {version}, not "
                       f"{tables.LAYOUT_VERSION}: each property is stored once now): ingest into a new output, "
                       "or again with --mode overwrite")
    files = resolve_inputs(inputs)
    rows, aside = parse.message_rows(read_lines(spark, files), *aside_bytes)
    with balanced_splits(spark, files):  # the messages write plans the scan of the lines
        messages = _write(rows.sortWithinPartitions("node", "date", *CLUSTERED_BY), mode, layout.messages)
    others = aside.rows()
    again = None
    if others is None:  # more than aside_bytes of them: read and parse the lines again
        with balanced_splits(spark, files):
            again = parse.parse(read_lines(spark, files)).where(~parse.is_message(F.col("corruptReason"), F.col("r")))
            others = again = again.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)
    try:  # two small jobs at once: their planning and commits overlap
        with ThreadPoolExecutor(1, thread_name_prefix="ingest-corrupt") as pool:
            corrupt = pool.submit(_write, parse.corrupt(others, time.time_ns() // 1_000_000), mode, layout.corrupt,
                                  partitioned=False)
            events = _write(parse.events(others), mode, layout.events)
        return IngestSummary(messages, events, corrupt.result())
    finally:
        if again is not None:
            _release(again)


def _release(checkpointed: DataFrame) -> None:
    """Drops a local checkpoint's blocks (PySpark has no public call for it: its RDD holds them)."""
    checkpointed._jdf.queryExecution().logical().rdd().unpersist(False)  # noqa: SLF001


def read_table(spark: SparkSession, path: str, schema: StructType) -> DataFrame:
    """A table written by the pipeline, with its declared schema (an empty table reads as empty)."""
    return spark.read.schema(schema).parquet(path)


def messages_layout(spark: SparkSession, path: str) -> int:
    """The layout (:func:`spark.tables.layout_version`) of the messages table at ``path`` (no table yet: this one's)."""
    try:
        return tables.layout_version(spark.read.parquet(path).schema.fieldNames())
    except AnalysisException:  # no table (or no file in it) yet: whatever is written now is this layout
        return tables.LAYOUT_VERSION


#: The columns that a messages table of an earlier layout is read with: the two maps of every property
#: instead of :data:`spark.tables.PROPERTY_COLUMNS` (the structs a layout-2 table has beside them are not read).
_EARLIER = StructType([field for field in tables.MESSAGES.fields if field.name not in {*tables.PROPERTY_COLUMNS, "node", "date"}]
                      + [StructField(name, tables.STRING_MAP, True) for name in tables.EARLIER_PROPERTY_COLUMNS]
                      + [tables.MESSAGES["node"], tables.MESSAGES["date"]])


def read_messages(spark: SparkSession, path: str) -> DataFrame:
    """The messages table in the layout of :data:`spark.tables.MESSAGES`; from a table of an earlier layout the
    property columns are derived from the two maps it stored (as ingest writes them now)."""
    if messages_layout(spark, path) == tables.LAYOUT_VERSION:
        return read_table(spark, path, tables.MESSAGES)
    earlier = read_table(spark, path, _EARLIER)
    return earlier.withColumns(parse.split_properties(*map(F.col, tables.EARLIER_PROPERTY_COLUMNS))).select(
        *tables.MESSAGES.fieldNames())


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    summary = ingest(spark, args.input, args.output, args.mode)
    print(f"ingest: {summary} -> {args.output}")
    return 0
