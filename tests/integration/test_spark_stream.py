"""`audit stream`: the rotated log directory streamed with a checkpoint; stopped mid-stream and restarted, it
writes exactly the findings of validate's rules over the same files (nothing lost, nothing twice, every
rule, the ones comparing records with their state in the checkpoint), and the windowed metrics."""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

import audit_oracle
from spark import loggen, rules, stream, tables
from spark.ingest import read_table
from spark.loggen import Message, lost, properties, received, rejected, sent
from spark.ingest import read_lines
from spark.parse import messages, parse

NODE = "ixc-s"
T0 = 1_794_999_960_000  # a minute boundary: the test windows are [T0, T0 + 60 s), ...


def _rotated_file(index: int) -> list[dict[str, object]]:
    """One rotated file's records: 20 messages, a few faults of the per-record rules."""
    records: list[dict[str, object]] = []
    base = T0 + index * 20_000
    for i in range(20):
        seq = index * 100 + i
        props = properties("DENM", local_id=str(seq), **({"originatingCountry": "nl"} if i == 3 else {}))
        message = Message(NODE, seq, base + i * 10, props, body=str(seq).encode())
        records.append(received(message))
        records.append(sent(message, message.arrival_ms + (45 if i == 7 else 5)))
    records.append(rejected(NODE, index * 100 + 50, base + 300, "messageType: missing (IP_022)"))
    gone = Message(NODE, index * 100 + 60, base + 400, properties("CAM", local_id=f"c{index}"))
    records += [received(gone), lost("dropped_message", gone, base + 401)]
    return records


def _write(log_dir: Path, index: int) -> None:
    """As the node's writer: the file appears complete, under its rotated name (atomic rename)."""
    partial = log_dir / f"node.log.part{index}"
    partial.write_text(loggen.lines(_rotated_file(index)))
    partial.rename(log_dir / f"node-2026111800{index:02d}00000000-{index:04d}.jsonl")


def _write_text(log_dir: Path, index: int, text: str) -> None:
    """As the node's writer: the file appears complete, under its rotated name (atomic rename)."""
    partial = log_dir / f"node.log.part{index}"
    partial.write_text(text)
    partial.rename(log_dir / f"node-2026113000{index:02d}00000000-{index:04d}.jsonl")


#: The streaming part's own limit, below pytest-timeout's 300 s (which also counts the session's start-up and
#: the batch run compared with): a hard timeout interrupts a py4j call half-way and leaves the shared
#: session's gateway unusable for every later Spark test; this limit stops the queries and fails with a message.
BUDGET_S = 210.0


def _await(queries: list[StreamingQuery], deadline: float) -> None:
    """Wait for the available-now queries to end by ``deadline`` (monotonic); else stop them and fail."""
    for query in queries:
        if not query.awaitTermination(max(1, int(deadline - time.monotonic()))):
            stream.stop(queries, settle_s=0)
            pytest.fail(f"{query.name} did not finish within the test's {BUDGET_S:.0f} s: {query.lastProgress}")


@contextmanager
def _stopped_on_error(queries: list[StreamingQuery]) -> Iterator[list[StreamingQuery]]:
    """Queries still running when the test fails are stopped (none left writing into the next test)."""
    try:
        yield queries
    finally:
        if any(q.isActive for q in queries):
            stream.stop(queries, settle_s=0)


def _row(row: object) -> tuple[object, ...]:
    """A finding but for the run's id and time."""
    return tuple(getattr(row, f.name) for f in tables.VIOLATIONS.fields[2:])


def test_stream_equals_the_batch_across_a_restart(spark: SparkSession, tmp_path: Path) -> None:
    """The oracle's log (a violation of every rule, tests/integration/audit_oracle) in four rotated files: the
    stream is stopped after its first file and started again when the rest are there; it ends with
    exactly the batch's findings, row for row. A file of older records copied in afterwards is later
    than the watermark: left out and counted, nothing else changes."""
    log_dir, out = tmp_path / "logs", str(tmp_path / "out")
    log_dir.mkdir()
    oracle = audit_oracle.build()
    contents = list(oracle.files(4))
    (log_dir / "node.log").write_text(contents[0])  # the active file: never streamed
    for index in range(2):
        _write_text(log_dir, index, contents[index])
    deadline = time.monotonic() + BUDGET_S
    with _stopped_on_error(stream.start(spark, str(log_dir), out, trigger_seconds=0.2,
                                        max_files_per_trigger=1)) as queries:
        # one file each, at least (recentProgress: a fast query's batch with rows may already be followed by empty ones)
        while not all(any(p["numInputRows"] for p in q.recentProgress) for q in queries):
            assert time.monotonic() < deadline, "the stream processed nothing"
            time.sleep(0.2)
        stream.stop(queries)  # mid-stream: some files are not read yet
    for index in range(2, 4):
        _write_text(log_dir, index, contents[index])
    (log_dir / "late.jsonl.tmp").write_text("not yet complete")  # not *.jsonl: ignored
    with _stopped_on_error(stream.start(spark, str(log_dir), out, available_now=True,
                                        max_files_per_trigger=2)) as queries:
        _await(queries, deadline)
    assert stream.dropped_late(queries) == 0

    streamed = read_table(spark, tables.Layout(out).stream_violations, tables.VIOLATIONS).collect()
    files = sorted(str(p) for p in log_dir.glob("*.jsonl"))
    # the batch as validate runs it (the Java walk), not the reference frames
    batch = rules.all_violations(messages(parse(read_lines(spark, files))), walked=True).collect()
    assert Counter(map(_row, streamed)) == Counter(map(_row, batch))
    assert audit_oracle.finding_keys(streamed) == oracle.expected
    assert {r.runId for r in streamed} == {"stream"}

    # older records after the watermark passed them: left out of the stream (validate checks them)
    late = audit_oracle.OracleLog()
    message = late.admit(audit_oracle.properties("DENM", "late"), audit_oracle.T0 + 5)
    late.sent(message, audit_oracle.T0 + 95)  # IP_012, were it in time
    _write_text(log_dir, 9, next(late.files(1)))
    with _stopped_on_error(stream.start(spark, str(log_dir), out, available_now=True)) as queries:
        _await(queries, deadline)
    assert stream.dropped_late(queries) >= 2
    assert Counter(map(_row, read_table(spark, tables.Layout(out).stream_violations, tables.VIOLATIONS).collect())) \
        == Counter(map(_row, batch))


def test_stream_windowed_metrics(spark: SparkSession, tmp_path: Path) -> None:
    log_dir, out = tmp_path / "logs", str(tmp_path / "out")
    log_dir.mkdir()
    for index in range(2):
        _write(log_dir, index)
    for n in (98, 99):  # 10 min later: moves the watermark past the windows (the next batch writes them)
        flush = log_dir / f"node-20261118T010000000000-00{n}.jsonl"
        flush.write_text(loggen.lines([received(Message(NODE, n, T0 + 600_000, properties("DENM", local_id="z")))]))
    with _stopped_on_error(stream.start(spark, str(log_dir), out, available_now=True,
                                        max_files_per_trigger=1)) as queries:
        _await(queries, time.monotonic() + BUDGET_S)
    rows = read_table(spark, tables.Layout(out).stream_metrics, tables.STREAM_METRICS).collect()
    by_key = {(r.windowStartMs, r.event, r.messageType): r for r in rows}
    received_row = by_key[(T0, "received_message", "DENM")]
    assert received_row.records == 40 and received_row.node == NODE
    sent_row = by_key[(T0, "sent_message", "DENM")]
    assert by_key[(T0, "dropped_message", "CAM")].records == 2
    assert (sent_row.records, sent_row.latencyMaxMs, sent_row.overLatency) == (40, 45, 2)
    assert sent_row.latencyAvgMs == (38 * 5 + 2 * 45) / 40
    assert all(r.windowStartMs < T0 + 600_000 - 120_000 for r in rows)  # the last window is still open
