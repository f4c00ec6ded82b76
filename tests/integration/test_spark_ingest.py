"""`audit ingest`: JSON-lines logs (v1 and v2, several nodes, corrupt lines) to partitioned Parquet."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from interchange.app.cli import main
from interchange.broker.validation import validate_application_properties
from interchange.ground.errors import CliError
from spark import loggen, parse, rules, tables
from spark.ingest import (
    ASIDE_BYTES_IN_DRIVER,
    ASIDE_BYTES_PER_TASK,
    CLUSTERED_BY,
    MAX_SPLIT_BYTES,
    balanced_splits,
    ingest,
    messages_layout,
    read_messages,
    read_lines,
    read_table,
    resolve_inputs,
    split_bytes,
)
from spark.session import settings
from spark.validate import load_messages, validate

T0 = 1_795_000_000_000  # 2026-11-18T...Z
#: Spark's generated code, as the audit session has it (the tests' session interprets every expression).
GENERATED_CODE = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "CODEGEN_ONLY"}


def _v1_sent() -> dict[str, object]:
    return {"schemaVersion": 1, "timestamp": "2026-11-23T10:00:00.050Z", "level": "info", "event": "sent_message",
            "node": "ixc-old", "address": "actor-2-src", "identity": "actor-2", "publisher": "actor-1",
            "arrivalTime": "2026-11-23T10:00:00.010Z", "departureTime": "2026-11-23T10:00:00.050Z", "size": 204,
            "applicationProperties": {"messageType": "DENM", "publicationId": "NL00001:7", "shardId": 2}}


def _write_logs(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    (logs / "a").mkdir(parents=True)
    message = loggen.Message("ixc-a", 1, T0, loggen.properties("DENM"))
    a = [loggen.received(message), loggen.sent(message, T0 + 4),
         loggen.event_record("connect", "ixc-a", T0 - 10, identity="actor-1"),
         loggen.rejected("ixc-a", 2, T0 + 5, "messageType: missing (IP_022)")]
    (logs / "a" / "node-20261123T100000000000-0001.jsonl").write_text(
        loggen.lines(a) + '{"schemaVersion":2,"timestamp":"2026-11-18T\n' + "not json at all\n\n"
        + '{"schemaVersion":2,"level":"info","event":"connect","node":"ixc-a"}\n')
    (logs / "b.log").write_text(json.dumps(_v1_sent()) + "\n[1, 2]\n")
    return logs


def test_ingest_writes_partitioned_tables_and_keeps_corrupt_lines(spark: SparkSession, tmp_path: Path) -> None:
    logs = _write_logs(tmp_path)
    out = str(tmp_path / "out")
    summary = ingest(spark, [str(logs / "a"), str(logs / "*.log")], out)
    assert (summary.messages, summary.events, summary.corrupt) == (4, 1, 4)
    layout = tables.Layout(out)
    assert sorted(p.name for p in (tmp_path / "out" / "messages").glob("node=*")) == ["node=ixc-a", "node=ixc-old"]
    assert [p.name for p in (tmp_path / "out" / "messages" / "node=ixc-old").iterdir()] == ["date=2026-11-23"]

    rows = {r.event: r for r in read_table(spark, layout.messages, tables.MESSAGES).where("node = 'ixc-a'").collect()}
    sent = rows["sent_message"]
    assert (sent.messageId, sent.consumer, sent.source, sent.attempt, sent.outcome) == (
        "ixc-a/1/1700000000000/1", "actor-2", "actor-2-src", 1, "accepted")
    assert (sent.arrivalMs, sent.departureMs, sent.shardSeq, sent.shardKey) == (T0, T0 + 4, 1, "NL00001:1#1")
    assert sent.standardProperties.causeCode == "3" and sent.standardKinds.causeCode == "integer"
    assert sent.standardKinds.longitude == "float" and sent.standardKinds.messageType == "string"
    assert sent.file.endswith("node-20261123T100000000000-0001.jsonl")
    assert rows["rejected_message"].reason == "messageType: missing (IP_022)"

    old = read_table(spark, layout.messages, tables.MESSAGES).where("node = 'ixc-old'").collect()[0]
    assert (old.schemaVersion, old.consumer, old.source, old.messageType, old.publicationId, old.shardId) == (
        1, "actor-2", "actor-2-src", "DENM", "NL00001:7", 2)
    assert old.departureMs - old.arrivalMs == 40 and old.timestampMs == old.departureMs

    event = read_table(spark, layout.events, tables.EVENTS).collect()[0]
    assert (event.event, event.details["identity"], event.timestampMs) == ("connect", "actor-1", T0 - 10)

    corrupt = sorted((r.reason, r.line[:20]) for r in read_table(spark, layout.corrupt, tables.CORRUPT).collect())
    assert corrupt == [
        ("not JSON (malformed or truncated)", '{"schemaVersion":2,"'),
        ("not a JSON object", "[1, 2]"),
        ("not a JSON object", "not json at all"),
        ("timestamp missing or invalid", '{"schemaVersion":2,"'),
    ]


def test_rows_that_are_not_messages_kept_aside_or_read_again(spark: SparkSession, tmp_path: Path) -> None:
    """Events and corrupt lines come out of the messages write's pass (kept aside up to a budget per task);
    over the budget the lines are read again for them: the same tables either way."""
    logs = _write_logs(tmp_path)
    inputs = [str(logs / "a"), str(logs / "*.log")]
    lines = read_lines(spark, resolve_inputs(inputs))
    parsed = parse.parse(lines)
    others = parsed.where(~parse.is_message(F.col("corruptReason"), F.col("r")))
    for task, driver, complete in ((1 << 20, 1 << 20, True), (0, 1 << 20, False), (1 << 20, 0, False)):
        rows, aside = parse.message_rows(lines, task, driver)
        assert rows.count() == 4  # the messages, no other row
        assert (aside.rows() is not None) == complete
    rows, kept = parse.message_rows(lines, 1 << 20, 1 << 20)
    rows.count()
    aside_rows = kept.rows()
    assert aside_rows is not None and aside_rows.columns == parsed.columns
    assert sorted(map(str, aside_rows.drop("value").collect())) == sorted(map(str, others.drop("value").collect()))
    assert sorted(row.value for row in aside_rows.collect() if row.corruptReason is not None) == sorted(
        row.value for row in others.where(F.col("corruptReason").isNotNull()).collect())

    written = {}
    for budget in (ASIDE_BYTES_PER_TASK, 0):
        out = tables.Layout(str(tmp_path / f"out-{budget}"))
        summary = ingest(spark, inputs, out.root, aside_bytes=(budget, ASIDE_BYTES_IN_DRIVER))
        written[budget] = (summary, *(sorted(map(str, read_table(spark, path, schema).drop("ingestedMs").collect()))
                                      for path, schema in ((out.messages, tables.MESSAGES), (out.events, tables.EVENTS),
                                                           (out.corrupt, tables.CORRUPT))))
    assert written[0] == written[ASIDE_BYTES_PER_TASK]
    assert (written[0][0].messages, written[0][0].events, written[0][0].corrupt) == (4, 1, 4)


def test_messages_are_written_clustered_by_event_type_and_time(spark: SparkSession, tmp_path: Path) -> None:
    """Each file of a node and date holds its rows in CLUSTERED_BY order, whatever the log's order (so a
    filter on the event or message type skips the pages of other rows)."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_text("\n".join(loggen.traffic(400, seed=3)) + "\n")
    out = tmp_path / "out"
    ingest(spark, [str(tmp_path / "logs")], str(out))
    files = sorted((out / "messages" / "node=ixc-a").glob("date=*/*.parquet"))
    assert files
    for file in files:  # one file is read in its order by one task
        rows = [tuple(row) for row in spark.read.parquet(str(file)).select(*CLUSTERED_BY).collect()]
        assert len({event for event, _, _ in rows}) > 1
        assert rows == sorted(rows, key=lambda r: (r[0], r[1] or "", r[2]))  # a rejected message has no type: first
    # the writer's settings (ingest.WRITE_OPTIONS): no dictionary for a column unique per row, one for a
    # repeating column, and the min/max statistics that the page skipping above relies on
    group = pyarrow.parquet.ParquetFile(files[0]).metadata.row_group(0)
    chunks = {chunk.path_in_schema: chunk for chunk in map(group.column, range(group.num_columns))}
    assert not chunks["messageId"].has_dictionary_page and not chunks["timestampMs"].has_dictionary_page
    assert chunks["event"].has_dictionary_page and chunks["messageType"].has_dictionary_page
    assert chunks["timestampMs"].statistics.has_min_max and chunks["event"].statistics.has_min_max


def test_the_messages_write_reads_each_line_once(spark: SparkSession, tmp_path: Path) -> None:
    """The messages write calls one Java function per line (the row in the table's layout, the others kept aside),
    in one whole stage with the sort, with no record check left to Spark's generated code; the same rows as the
    reference (parse and messages)."""
    logs = _write_logs(tmp_path)
    lines = read_lines(spark, resolve_inputs([str(logs / "a"), str(logs / "*.log")]))
    rows, _ = parse.message_rows(lines, 1 << 20, 1 << 20)
    sorted_rows = rows.sortWithinPartitions("node", "date", *CLUSTERED_BY)
    simple = spark._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("simple")
    with settings(spark, GENERATED_CODE):  # the tests' session runs without (spark.session's does not)
        plan = sorted_rows._jdf.queryExecution().explainString(simple)
    assert plan.count(parse.INGEST_FUNCTION) == 1 and parse.PARSE_FUNCTION not in plan, plan
    assert parse.VERSION_MISSING not in plan and "try_cast" not in plan, plan
    for node in ("Sort [", "Project [_row", "Filter isnotnull(_row", f"Project [{parse.INGEST_FUNCTION}("):
        assert any(f"*(1) {node}" in line for line in plan.splitlines()), (node, plan)  # one whole stage
    reference = parse.messages(parse.parse(lines))
    assert rows.schema == reference.schema  # tables.MESSAGES, file and node never null
    assert sorted(map(str, rows.collect())) == sorted(map(str, reference.collect())) and rows.count() == 4


def test_times_out_of_range_are_unreadable_not_fatal(spark: SparkSession, tmp_path: Path) -> None:
    """A time outside the years 0001-9999 is read as no time: a record without another is corrupt, a
    message's times come from its ISO times or are null; neither stops ingest (one past Spark's
    timestamps did, at the record's date) nor validate (two far apart would overflow a subtraction)."""
    message = loggen.Message("ixc-a", 1, T0, loggen.properties("DENM"))
    far = {**loggen.sent(message, T0 + 4), "arrivalMs": 9_000_000_000_000_000_000,
           "departureMs": -9_000_000_000_000_000_000, "settledMs": 2**63 - 1, "expiryMs": -(2**63)}
    # past Spark's microsecond timestamps; 10000-01-01T00:00:00Z; 0000-12-31T23:59:59.999Z
    events = [{**loggen.event_record("connect", "ixc-a", T0), "timestampMs": ms} for ms in
              (9_000_000_000_000_000_000, 253_402_300_800_000, -62_135_596_800_001)]
    for event in events:
        del event["timestamp"]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_text(loggen.lines([loggen.received(message), far, *events]))
    layout = tables.Layout(str(tmp_path / "out"))
    summary = ingest(spark, [str(tmp_path / "logs")], layout.root)
    assert (summary.messages, summary.events, summary.corrupt) == (2, 0, 3)
    reasons = [row.reason for row in read_table(spark, layout.corrupt, tables.CORRUPT).collect()]
    assert reasons == ["timestamp missing or invalid"] * 3
    sent = read_table(spark, layout.messages, tables.MESSAGES).where("event = 'sent_message'").collect()[0]
    assert (sent.timestampMs, sent.arrivalMs, sent.departureMs, sent.settledMs, sent.expiryMs) == (
        T0 + 4, T0, T0 + 4, None, None)
    run = validate(spark, load_messages(spark, [layout.root]), layout.root, "t")
    assert run.metrics


def test_audit_cli_ingest_and_bad_input(spark: SparkSession, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    logs = _write_logs(tmp_path)
    assert main(["audit", "ingest", "--input", str(logs / "nowhere*.jsonl"), "--output", str(tmp_path / "o")]) == 2
    assert "no log files at" in capsys.readouterr().err
    # the CLI runs the job in the shared session (getOrCreate) and stops it only if it created it
    assert main(["audit", "ingest", "--input", str(logs), "--output", str(tmp_path / "o")]) == 0
    assert "ingest: 1 message records, 0 other events, 1 corrupt lines" in capsys.readouterr().out


def test_each_property_stored_once_and_tables_of_earlier_layouts(spark: SparkSession, tmp_path: Path) -> None:
    props = loggen.properties("DENM", **{"custom-acme-x": 1, "x-bad": "a", "iviStatus": None})
    line = loggen.lines([loggen.received(loggen.Message("ixc-a", 1, T0, props))])
    (tmp_path / "logs").mkdir()
    # a name written with a JSON escape is the name (Spark's JSON reader decodes it before the kinds are read)
    (tmp_path / "logs" / "a.jsonl").write_text(line.replace('"quadTree"', '"quad\\u0054ree"'))
    new = str(tmp_path / "new")
    ingest(spark, [str(tmp_path / "logs")], new)
    assert tables.layout_version(spark.read.parquet(tables.Layout(new).messages).schema.fieldNames()) == tables.LAYOUT_VERSION
    # a map's order is Spark's (a Python dict of a collected row has its own): its keys as an array
    with_names = {"names": F.map_keys("otherProperties"), "kindNames": F.map_keys("otherKinds")}
    row = read_messages(spark, tables.Layout(new).messages).withColumns(with_names).collect()[0]
    assert (row.standardProperties.causeCode, row.standardKinds.causeCode) == ("3", "integer")
    assert (row.standardKinds.longitude, row.standardKinds.messageType, row.standardKinds.vehicleRole) == (
        "float", "string", None)
    assert (row.standardProperties.quadTree, row.standardKinds.quadTree) == (props["quadTree"], "string")
    assert (row.standardProperties.iviStatus, row.standardKinds.iviStatus) == (None, "null")
    # only the properties outside tables 1-7 in the maps, in the order written
    assert (row.otherProperties, row.otherKinds) == ({"custom-acme-x": "1", "x-bad": "a"},
                                                     {"custom-acme-x": "integer", "x-bad": "string"})
    assert row.names == row.kindNames == ["custom-acme-x", "x-bad"]

    # tables of the earlier layouts (1: the two maps of every property; 2: the maps and tables 1-7's columns
    # beside them): readers derive the columns of this layout from the maps
    whole = read_table(spark, tables.Layout(new).messages, tables.MESSAGES).withColumns(
        {"applicationProperties": parse.all_properties(), "propertyKinds": parse.all_properties(kinds=True)})
    earlier = {1: whole.drop(*tables.PROPERTY_COLUMNS),
               2: whole.withColumn("otherPropertyNames", F.map_keys("otherProperties")).drop("otherProperties", "otherKinds")}
    layouts = {new: tables.LAYOUT_VERSION}
    for version, frame in earlier.items():
        old = str(tmp_path / f"layout{version}")
        frame.write.partitionBy("node", "date").parquet(tables.Layout(old).messages)
        assert messages_layout(spark, tables.Layout(old).messages) == version
        derived = read_messages(spark, tables.Layout(old).messages).withColumns(with_names).collect()[0]
        assert [derived[c] for c in (*tables.PROPERTY_COLUMNS, "names", "kindNames")] == [
            row[c] for c in (*tables.PROPERTY_COLUMNS, "names", "kindNames")]
        layouts[old] = version
        with pytest.raises(CliError, match=f"written by an earlier ingest \\(layout {version}"):
            ingest(spark, [str(tmp_path / "logs")], old, mode="append")
    found = {layout: validate(spark, load_messages(spark, [layout]), layout, "t", rule_set=[rules.properties]).metrics
             for layout in layouts}
    # x-bad (IP_131) and iviStatus null (IP_029), as the broker's validation finds
    assert sum(m.violations for m in found[new]) == len(validate_application_properties(props)) == 2
    assert all(metrics == found[new] for metrics in found.values())


def test_every_property_put_back_together(spark: SparkSession, tmp_path: Path) -> None:
    """A property whose value is an object of several keys (another writer's log: the node writes such
    values as text), tables 1-7's null and absent ones: the map of every property has each logged one
    and its kind, and only those; a record without properties has none."""
    record = loggen.received(loggen.Message("ixc-a", 1, T0, loggen.properties("DENM")))
    props = {**record["applicationProperties"], "x-shape": {"kind": "circle", "r": 2.5, "at": [1, 2]}, "x-n": 7,  # type: ignore[dict-item]
             "iviStatus": None}
    bare = {**loggen.received(loggen.Message("ixc-a", 2, T0 + 1, loggen.properties("DENM"))), "applicationProperties": None}
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.jsonl").write_text(loggen.lines([{**record, "applicationProperties": props}, bare]))
    ingest(spark, [str(tmp_path / "logs")], str(tmp_path / "out"))
    rows = read_messages(spark, tables.Layout(str(tmp_path / "out")).messages).orderBy("timestampMs").select(
        parse.all_properties().alias("values"), parse.all_properties(kinds=True).alias("kinds")).collect()
    values, kinds = rows[0]["values"], rows[0]["kinds"]
    assert set(kinds) == set(values) == set(props)
    assert (kinds["x-shape"], kinds["x-n"], kinds["causeCode"], kinds["longitude"]) == ("object", "integer", "integer", "float")
    assert json.loads(values["x-shape"]) == props["x-shape"]
    assert (values["iviStatus"], kinds["iviStatus"], values["causeCode"], values["x-n"]) == (None, "null", "3", "7")
    assert (rows[1]["values"], rows[1]["kinds"]) == (None, None)


def test_input_splits_give_every_core_equal_tasks() -> None:
    mb = 1024 * 1024
    # a 448 MiB log on 2 cores: 4 x 112 MiB, not 128 + 128 + 128 + 64 (a core idle for half the last round)
    assert split_bytes(448 * mb, 2) == 112 * mb
    assert split_bytes(1794 * mb, 2) == math.ceil(1794 * mb / 16)  # 16 equal tasks, not 14 and a 2 MiB one
    assert split_bytes(100 * mb, 2) == 50 * mb  # a small log still uses both cores
    assert split_bytes(10, 4) == 3
    for total, cores in ((448 * mb, 2), (1794 * mb, 2), (470 * mb, 2), (5000 * mb, 8)):
        size = split_bytes(total, cores)
        assert size <= MAX_SPLIT_BYTES and math.ceil(total / size) % cores == 0


def test_ingest_scans_in_balanced_splits_and_restores_the_setting(spark: SparkSession, tmp_path: Path) -> None:
    log = tmp_path / "node.jsonl"
    message = loggen.Message("ixc-a", 1, T0, loggen.properties("DENM"))
    log.write_text(loggen.lines([loggen.received(message)] * 200))
    key = "spark.sql.files.maxPartitionBytes"
    before = spark.conf.get(key)
    with balanced_splits(spark, [str(log)]):
        parts = spark.read.text(str(log)).rdd.getNumPartitions()
        assert spark.conf.get(key) == str(split_bytes(log.stat().st_size, spark.sparkContext.defaultParallelism))
    assert parts == spark.sparkContext.defaultParallelism
    assert spark.conf.get(key) == before
