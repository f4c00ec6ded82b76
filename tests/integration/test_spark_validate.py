"""`audit validate`: each rule on a small log with known faults (exact violations), metrics history, and the
tables 1-7 rules held against interchange/broker/validation.py on generated messages (differential)."""
from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from interchange.app.cli import main
from interchange.broker.validation import validate_application_properties
from interchange.ground import logformat
from spark import loggen, parse, property_rules, rules, tables
from spark.ingest import ingest, read_table
from spark.loggen import Message, lost, properties, received, rejected, sent
from spark.validate import local_rows, validate

T0 = 1_795_000_000_000
NODE = "ixc-a"


def _messages(spark: SparkSession, records: list[dict[str, object]]):
    lines = spark.createDataFrame([(logformat.dumps(r), "mem") for r in records], "value string, file string")
    return parse.messages(parse.parse(lines))


# --- tables 1-7: Spark against validation.py --------------------------------------------------------

_BAD_VALUES: dict[str, list[object]] = {
    "publisherId": ["NL16384", "nl1", "NL", "NL123456", "NL1\n", 7, "NL16383", "DE0015608"],
    "originatingCountry": ["NLD", "nl", "", True, None],
    "protocolVersion": ["", 2],
    "baselineVersion": ["", "1.0"],
    "serviceType": [",a,,b,", "a,b,", ",", ",x,", 3],
    "messageType": ["FOO", "denm", 1.5],
    "longitude": [181.0, -180.0, 5, "4.7", 1e300, -0.0],
    "latitude": [90.5, -90.0, None],
    "quadTree": [",", ",12,", "12020,", ",120202101232300231,12a,", ",120202101232300231,\n", ",,120202101232300231,",
                 ",1202021012323002310,", 12],
    "shardId": [0, -1, 3, 2**70, "1", 1.0],
    "shardCount": [0, 2, 2**40, 2**31 - 1, "2"],
    "causeCode": [-1, 256, -2, "3", 0],
    "subCauseCode": [-1, 255, 300],
    "iviStatus": [8, -1, 7],
    "iviType": [",1,x,", ",-1,", ",1,2,", ",1.5,"],
    "pictogramCategoryCode": [",557,", ",,", "557"],
    "iviContainer": [",a,", "a"],
    "id": [",1,2,", ",,", 5],
    "name": [",x,", "x,"],
    "stationType": [300, 5, -1, "5"],
    "vehicleRole": [16, 0, 15.0],
    "type": ["Car", "RSU", "Vehicle", ""],
    "publicationId": ["NL00002:1", "NL00001:", ":1", "NL00001", "NL00001:a:b"],
    "custom-acme-x": [1],
    "x-custom": ["a"],
    "custom--y": ["a"],
    "custom-a-": ["a"],
    "cüstom-ä-ö": ["a"],
}


def _generated(rng: random.Random, index: int) -> dict[str, object]:
    message_type = rng.choice(["DENM", "IVIM", "CAM", "CPM", "SPATEM", "MAPEM", "SREM", "POIM-PA"])
    props = properties(message_type, "NL00001", str(index))
    for _ in range(rng.randrange(4)):
        name = rng.choice(list(_BAD_VALUES))
        props[name] = rng.choice(_BAD_VALUES[name])
    for _ in range(rng.randrange(2)):
        props.pop(rng.choice(list(props)), None)
    return props


def test_table_rules_agree_with_validation_py(spark: SparkSession) -> None:
    rng = random.Random(22)
    generated = [_generated(rng, i) for i in range(600)]
    records = [received(Message(NODE, i + 1, T0 + i, props)) for i, props in enumerate(generated)]
    messages = _messages(spark, records).cache()
    found = (messages.select("messageId", F.explode(property_rules.findings()).alias("f"))
             .select("messageId", "f.property", "f.rule").collect())
    # the cheap test validate runs first holds exactly for the messages without findings here
    quick = messages.select("messageId", property_rules.valid().alias("valid"),
                            (F.size(property_rules.findings()) == 0).alias("clean")).collect()
    assert [row.messageId for row in quick if row.valid != row.clean] == []
    assert 50 < sum(row.valid for row in quick) < 550
    spark_findings: dict[str, Counter[tuple[str, str]]] = {}
    for row in found:
        spark_findings.setdefault(row.messageId, Counter())[(row.property, row.rule)] += 1
    python_findings = {loggen.message_id(NODE, i + 1): Counter((p.property, p.requirement)
                                                               for p in validate_application_properties(props))
                       for i, props in enumerate(generated)}
    disagreements = {mid: (dict(python_findings[mid]), dict(spark_findings.get(mid, Counter())), generated[i])
                     for i, mid in enumerate(python_findings) if python_findings[mid] != spark_findings.get(mid, Counter())}
    assert not disagreements
    assert sum(map(len, python_findings.values())) > 500  # the generator produces faults of every kind
    assert len({rule for c in python_findings.values() for _, rule in c}) >= 11


# --- every rule on a small log with known faults ----------------------------------------------------

def _faulty_log() -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    add = records.append
    # a DENM delivered in 12 ms, then a late one (IP_012), one after expiry (IP_033), one invalid (IP_022)
    ok = Message(NODE, 1, T0, properties("DENM", local_id="1"), shard_seq=1)
    late = Message(NODE, 2, T0 + 100, properties("DENM", local_id="2"), body=b"b2", shard_seq=1)
    stale = Message(NODE, 3, T0 + 200, properties("DENM", local_id="3"), body=b"b3", shard_seq=1, expiry_ms=T0 + 210)
    bad = Message(NODE, 4, T0 + 300, properties("DENM", local_id="4", originatingCountry="nl"), body=b"b4")
    for message, delay in ((ok, 12), (late, 31), (stale, 20), (bad, 5)):
        add(received(message))
        add(sent(message, message.arrival_ms + delay))
    # a released delivery and its redelivery; the same delivery duplicates nothing
    add(sent(ok, T0 + 25, consumer="actor-3", source="s3", outcome="released"))
    add(sent(ok, T0 + 45, consumer="actor-3", source="s3", attempt=2))
    # IP_128: shard NL00001:9#1 delivered 2 before 1 on one link
    first = Message(NODE, 5, T0 + 400, properties("IVIM", local_id="9"), body=b"i1", shard_seq=1)
    second = Message(NODE, 6, T0 + 401, properties("IVIM", local_id="9"), body=b"i2", shard_seq=2)
    add(received(first))
    add(received(second))
    add(sent(second, T0 + 405))
    add(sent(first, T0 + 406))
    # IP_048: IVIM NL00001:9 again after 9 min + 1 ms; a duplicate of its first body
    again = Message(NODE, 7, T0 + 401 + 540_001, properties("IVIM", local_id="9"), body=b"i1", shard_seq=3)
    add(received(again))
    add(sent(again, again.arrival_ms + 3))
    # IP_104: SPATEM of intersection 7 before its MAPEM; intersection 1 fine (MAPEM first)
    add(received(Message(NODE, 8, T0 + 500, properties("MAPEM", local_id="m1", id=",1,"), body=b"m1")))
    add(received(Message(NODE, 9, T0 + 510, properties("SPATEM", local_id="s1", id=",1,"), body=b"s1")))
    add(received(Message(NODE, 10, T0 + 520, properties("SPATEM", local_id="s7", id=",7,"), body=b"s7")))
    add(received(Message(NODE, 11, T0 + 530, properties("MAPEM", local_id="m7", id=",7,"), body=b"m7")))
    # IP_124: CAMs 1000 ms then 999 ms apart; IP_136: CPMs 1000 then 1500 ms apart
    for seq, at in ((12, 0), (13, 1000), (14, 1999)):
        add(received(Message(NODE, seq, T0 + 600 + at, properties("CAM", local_id="c"), body=f"c{seq}".encode())))
    for seq, at in ((15, 0), (16, 1000), (17, 2500)):
        add(received(Message(NODE, seq, T0 + 700 + at, properties("CPM", local_id="p"), body=f"p{seq}".encode())))
    # IP_016 / IP_032 / IP_033 accounting / unroutable
    add(rejected(NODE, 18, T0 + 800, "quadTree: malformed (IP_037)"))
    add(rejected(NODE, 19, T0 + 801, "quadTree: malformed (IP_037)"))
    gone = Message(NODE, 20, T0 + 900, properties("DENM", local_id="20"), body=b"g")
    add(received(gone))
    add(lost("dropped_message", gone, T0 + 901))
    add(lost("expired_message", gone, T0 + 60_900))
    nobody = Message(NODE, 21, T0 + 950, properties("DENM", local_id="21"), body=b"n")
    add(received(nobody))
    add(lost("unroutable_message", nobody, T0 + 950))
    return records


EXPECTED = {
    ("IP_012", "latency", loggen.message_id(NODE, 2), "31 ms"),
    ("IP_033", "delivered_after_expiry", loggen.message_id(NODE, 3), "delivered 10 ms after expiry"),
    ("IP_022", "properties", loggen.message_id(NODE, 4), "originatingCountry=nl"),
    ("AUDIT", "delivery_outcome", loggen.message_id(NODE, 1), "released"),
    ("AUDIT", "redelivery", loggen.message_id(NODE, 1), "attempt 2 on s3"),
    ("IP_128", "shard_order", loggen.message_id(NODE, 5), "shardSeq 1 after 2 on NL00001:9#1"),
    ("IP_048", "repetition", loggen.message_id(NODE, 7), "540001 ms since the previous one"),
    ("AUDIT", "duplicate", loggen.message_id(NODE, 7), f"copy 2 (another messageId), first arrived at {T0 + 400}"),
    ("IP_104", "spatem_after_mapem", loggen.message_id(NODE, 10), "SPATEM before any MAPEM of intersection '7'"),
    ("IP_124", "cam_rate", loggen.message_id(NODE, 14), "999 ms since the previous one"),
    ("IP_136", "cpm_rate", loggen.message_id(NODE, 17), "1500 ms since the previous one"),
    ("IP_016", "rejected", loggen.message_id(NODE, 18), "quadTree: malformed (IP_037)"),
    ("IP_016", "rejected", loggen.message_id(NODE, 19), "quadTree: malformed (IP_037)"),
    ("IP_032", "dropped", loggen.message_id(NODE, 20), "dropped from actor-2-src: buffer_full"),
    ("IP_033", "expired_undelivered", loggen.message_id(NODE, 20), "expired undelivered in actor-2-src"),
    ("AUDIT", "unroutable", loggen.message_id(NODE, 21), "no source took it"),
}


@pytest.fixture(scope="module")
def faulty_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The faulty log ingested, then validated once through the command line: (output root, its stdout);
    the run's textfile-collector metrics are in ``<root>/../interchange_audit.prom``."""
    base = tmp_path_factory.mktemp("faulty")
    log = base / "node-20261118T000000000000-0001.jsonl"
    log.write_text(loggen.lines(_faulty_log()))
    out = str(base / "out")
    ingest(spark, [str(log)], out)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["audit", "validate", "--input", out, "--output", out, "--run-id", "run-1",
                     "--metrics-file", str(base / "interchange_audit.prom")]) == 0
    return out, printed.getvalue()


def test_every_rule_finds_exactly_the_known_faults(spark: SparkSession, faulty_run: tuple[str, str]) -> None:
    out, printed = faulty_run
    found = read_table(spark, tables.Layout(out).violations, tables.VIOLATIONS).collect()
    assert {(v.rule, v.check, v.messageId, v.observed) for v in found} == EXPECTED
    assert len(found) == len(EXPECTED)
    row = next(v for v in found if v.rule == "IP_012")
    assert (row.runId, row.severity, row.node, row.publicationId, row.consumer, row.expected) == (
        "run-1", "error", NODE, "NL00001:2", "actor-2", "< 30 ms")
    assert row.requirement.startswith("A broker shall be able to route a single message")
    assert "validate: run run-1: 16 findings" in printed and "IP_012   latency" in printed


def test_rule_metrics_count_checked_and_violations(spark: SparkSession, faulty_run: tuple[str, str]) -> None:
    out, _ = faulty_run
    history = read_table(spark, tables.Layout(out).rule_metrics, tables.RULE_METRICS).collect()
    metrics = {(m.rule, m.check): (m.checked, m.violations) for m in history}
    assert len(metrics) == len(history) == len(rules.CHECKS) + len(property_rules.REQUIREMENTS)
    assert metrics[("IP_012", "latency")] == (8, 1)  # first deliveries: 4 + 1 DENM, 3 IVIM
    assert metrics[("IP_016", "rejected")] == (19 + 2, 2)  # received and rejected messages
    assert metrics[("IP_022", "properties")] == (19, 1) and metrics[("IP_131", "properties")] == (19, 0)
    assert metrics[("IP_104", "spatem_after_mapem")] == (2, 1)
    assert metrics[("IP_048", "repetition")] == (1 + 1, 1)  # IVIM NL00001:9 three times: two gaps
    assert metrics[("IP_013", "burst")] == (0, 0)  # no second with 5000 arrivals: nothing checked


def test_the_metrics_file_holds_the_runs_findings(spark: SparkSession, faulty_run: tuple[str, str]) -> None:
    """The textfile-collector file agrees with the run's rule metrics, and promtool accepts it."""
    out, _ = faulty_run
    path = Path(out).parent / "interchange_audit.prom"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(path.read_text()) for s in family.samples}
    history = read_table(spark, tables.Layout(out).rule_metrics, tables.RULE_METRICS).collect()
    assert {(dict(k[1])["rule"], dict(k[1])["check"], dict(k[1])["severity"]): v for k, v in samples.items()
            if k[0] == "interchange_audit_findings"} == {(m.rule, m.check, m.severity): m.violations for m in history}
    assert samples[("interchange_audit_findings", (("check", "latency"), ("rule", "IP_012"), ("severity", "error")))] == 1
    assert samples[("interchange_audit_last_run_timestamp_seconds", ())] == history[0].runMs / 1000
    checked = subprocess.run(["promtool", "check", "metrics"], input=path.read_text(), capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_local_rows_keep_every_value(spark: SparkSession) -> None:
    """The rule metrics' rows go to the JVM as one JSON text: every value, quote, line break, large
    number and null arrives as it was, in order, with the table's schema."""
    rows = [("run", 2**62 + 1, 'a "quoted" input, ünïcode', "IP_012", "latency", "text\nwith lines", "error", 0,
             2**40),
            ("run", -1, None, "AUDIT", "", "", "info", 7, 0)]
    frame = local_rows(spark, rows, tables.RULE_METRICS)
    assert frame.schema == tables.RULE_METRICS
    assert [tuple(row) for row in frame.collect()] == rows
    assert local_rows(spark, [], tables.RULE_METRICS).count() == 0


def test_burst_rule_and_history_of_runs(spark: SparkSession, tmp_path: Path) -> None:
    records = []
    for i in range(5000):  # 5000 messages arrive within one second; the last is available 1001 ms after the first
        message = Message(NODE, i + 1, T0 + i // 5, properties("CAM", local_id=str(i)), body=str(i).encode())
        records.append(received(message))
        records.append(sent(message, T0 + 1001 if i == 4999 else message.arrival_ms + 1))
    out = str(tmp_path / "out")
    messages = _messages(spark, records)
    validate(spark, messages, out, "burst", "first", [rules.bursts, rules.latency])
    second = validate(spark, messages, out, "burst", "second", [rules.bursts, rules.latency])
    found = read_table(spark, tables.Layout(out).violations, tables.VIOLATIONS).where("rule = 'IP_013'").collect()
    assert sorted((v.runId, v.observed) for v in found) == [
        (run, "5000 messages arrived in this second, the last available 1001 ms after the first")
        for run in ("first", "second")]
    assert {(m.rule, m.check): (m.checked, m.violations) for m in second.metrics} == {
        ("IP_013", "burst"): (1, 1), ("IP_012", "latency"): (5000, 0)}
    history = read_table(spark, tables.Layout(out).rule_metrics, tables.RULE_METRICS)
    assert history.where("rule = 'IP_013'").select("runId").distinct().count() == 2
    again = validate(spark, messages, out, "burst", "second", [rules.bursts, rules.latency])  # a run id given twice
    assert {(m.rule, m.check): (m.checked, m.violations) for m in again.metrics} == {
        ("IP_013", "burst"): (1, 1), ("IP_012", "latency"): (5000, 0)}


def test_a_log_without_findings_is_counted(spark: SparkSession, tmp_path: Path) -> None:
    """A clean log (no finding in any frame) still gives every frame's checked rows: adaptive execution's
    empty stages took the frames' row counts with them, and the run failed. The session's own excluded
    rules are put back after the run."""
    message = Message(NODE, 1, T0, properties("DENM"))
    key = "spark.sql.adaptive.optimizer.excludedRules"
    before = spark.conf.get(key, None)
    run = validate(spark, _messages(spark, [received(message), sent(message, T0 + 4)]), str(tmp_path / "out"), "clean")
    assert run.violations == 0
    checked = {(m.rule, m.check): m.checked for m in run.metrics}
    assert checked[("IP_012", "latency")] == 1 and checked[("IP_026", "properties")] == 1
    assert checked[("AUDIT", "record_logged_twice")] == 2
    assert spark.conf.get(key, None) == before


def test_burst_counts_messages_not_records(spark: SparkSession, tmp_path: Path) -> None:
    """IP_013 checks a second by its messages, each once: 5000 records of 4999 messages (one logged twice)
    are not a burst, 5000 records of 5000 messages and 5001 records of 5000 messages are, 4999 records are
    not (validate counts the records of a second first and the messages of the busy seconds alone)."""
    records = []
    for second, (messages, twice) in enumerate(((4999, 1), (5000, 0), (5000, 1), (4999, 0))):
        start = T0 + second * 10_000
        for i in range(messages):  # each second's last message is available 1001 ms after its first
            message = Message(NODE, second * 10_000 + i + 1, start + i // 5,
                              properties("CAM", local_id=f"{second}-{i}"), body=f"{second}-{i}".encode())
            records += [received(message)] * (1 + (i < twice))
            records.append(sent(message, start + 1001 if i == messages - 1 else message.arrival_ms + 1))
    run = validate(spark, _messages(spark, records), str(tmp_path / "out"), "burst", "burst", [rules.bursts])
    found = read_table(spark, tables.Layout(str(tmp_path / "out")).violations, tables.VIOLATIONS).collect()
    assert sorted((v.timestampMs, v.observed) for v in found) == [
        (T0 + second * 10_000, "5000 messages arrived in this second, the last available 1001 ms after the first")
        for second in (1, 2)]
    assert [(m.check, m.checked, m.violations) for m in run.metrics] == [("burst", 2, 2)]


def test_a_second_validate_compiles_no_code_again(spark: SparkSession, faulty_run: tuple[str, str],
                                                  tmp_path: Path) -> None:
    """A later validate in the JVM finds its code compiled: nothing run-specific is written into the
    generated Java of the rules (a Python lambda's fresh name, the run's time), so it is not compiled
    and JIT-compiled again. With code generation on, as audit sessions run (the test session runs
    without, for speed)."""
    out, _ = faulty_run
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    compiles = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    messages = read_table(spark, tables.Layout(out).messages, tables.MESSAGES)
    counts = []
    generated = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}  # the defaults
    saved = {key: str(spark.conf.get(key)) for key in generated}
    try:
        for key, value in generated.items():
            spark.conf.set(key, value)
        for run in ("first", "second", "third"):
            before = compiles.getCount()
            validate(spark, messages, str(tmp_path / "out"), "codegen", run)
            counts.append(compiles.getCount() - before)
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
    # nothing the same validate runs is compiled twice: no run's value (its time) is in the generated
    # Java, nor a stage number (adaptive execution numbers stages in the order they are created,
    # which follows which stages finished first: a later run compiled 4-6 classes now and then)
    assert counts[0] > 20 and counts[1:] == [0, 0], counts


def _hostile_log() -> list[tuple[dict[str, object], str]]:
    """(record, file) pairs the walk must take as the window frames do: the faulty log in two files, one of
    them logged twice (every record again, in the second file), plus records whose fields the broker never
    writes together: a shardKey not of the publicationId, a sent message without shardKey, a shard restarted
    in another admission sequence with a gap, arrivals without time or body, a messageId with a line break,
    a SPATEM without publicationId, MAPEMs of another node."""
    records = _faulty_log()
    pairs = [(r, "a.jsonl") for r in records] + [(r, "b.jsonl") for r in records[:12]]
    odd = Message(NODE, 30, T0 + 1000, properties("DENM", local_id="30"), body=b"b2", shard_seq=5)
    record = received(odd)
    record["shardKey"] = "NL00001:2#1"  # the shard of another publication, a gap of 3 after its seq 1
    pairs.append((record, "a.jsonl"))
    delivery = sent(odd, T0 + 1003)
    delivery["shardKey"] = None
    pairs += [(delivery, "a.jsonl"), (sent(odd, T0 + 1004, consumer="x"), "b.jsonl")]
    for seq, shard_seq, process in ((31, 1, 2), (32, 4, 2), (33, 2, 2)):
        message = Message(NODE, seq, T0 + 1100 + seq, properties("CAM", local_id="r"), shard_seq=shard_seq,
                          process=process, body=f"r{seq % 2}".encode())
        pairs += [(received(message), "a.jsonl"), (sent(message, T0 + 1200 - seq), "a.jsonl")]
    timeless = received(Message(NODE, 34, T0 + 1300, properties("CAM", local_id="r"), body=b"r1"))
    timeless.pop("arrivalMs")
    bodiless = received(Message(NODE, 35, T0 + 1310, properties("CAM", local_id="r")))
    bodiless.pop("bodySha256")
    broken = received(Message(NODE, 36, T0 + 1320, properties("CPM", local_id="p"), body=b"p36"))
    broken["messageId"] = f"{NODE}/1/17\n00/36"
    spatem = received(Message(NODE, 37, T0 + 1330, properties("SPATEM", local_id="s1", id=",1,9,"), body=b"s9"))
    spatem["publicationId"] = None
    other = received(Message("ixc-b", 38, T0 + 100, properties("MAPEM", local_id="m9", id=",9,"), body=b"m9"))
    pairs += [(r, "a.jsonl") for r in (timeless, bodiless, broken, spatem, other)]
    # records of one message and no role, each logged again after the other (not next to each other in file
    # order), one of them three times in two files; its arrival logged again at another time (another record),
    # and again with another arrivalMs only (another record too: its rows are placed elsewhere in the walk)
    thrice = Message(NODE, 39, T0 + 1400, properties("DENM", local_id="39"), body=b"t39")
    redelivered, expired = sent(thrice, T0 + 1450, attempt=2), lost("expired_message", thrice, T0 + 1460)
    later = {**received(thrice), "timestamp": logformat.iso_ms(T0 + 1401), "timestampMs": T0 + 1401}
    moved = {**received(thrice), "arrivalMs": T0 + 1405}
    pairs += [(received(thrice), "a.jsonl"), (redelivered, "a.jsonl"), (expired, "a.jsonl"), (expired, "a.jsonl"),
              (redelivered, "b.jsonl"), (expired, "b.jsonl"), (later, "b.jsonl"), (moved, "b.jsonl")]
    # one message expired in many sources (records alone, one run of the walk), two of them logged again
    fanned = Message(NODE, 40, T0 + 1500, properties("DENM", local_id="40"), body=b"f40")
    gone = [lost("expired_message", fanned, T0 + 1600, source=f"actor-{n}-src") for n in range(60)]
    pairs += [(record, "a.jsonl") for record in gone] + [(gone[7], "b.jsonl"), (gone[41], "a.jsonl")]
    return pairs


def test_the_walk_finds_what_the_window_frames_find(spark: SparkSession) -> None:
    """The rules the Java walk runs (records, shards, links, publications, SPATEMs) against their frames in Spark
    (``all_violations(walked=False)``) on records the broker never logs together, row for row."""
    lines = spark.createDataFrame([(logformat.dumps(r), f) for r, f in _hostile_log()], "value string, file string")
    m = parse.messages(parse.parse(lines)).cache()
    walks: list[rules.Walk] = []
    walked = {tuple(r) for r in rules.all_violations(m, walks=walks, walked=True).collect()}
    framed = {tuple(r) for r in rules.all_violations(m).collect()}
    assert len(walks) == 1
    assert walked == framed
    checks = Counter(row[11] for row in framed)
    assert {"shard_gap", "shard_order", "duplicate", "record_logged_twice", "spatem_after_mapem", "cam_rate",
            "cpm_rate", "repetition", "latency"} <= set(checks)
    twice = Counter(row[14] for row in framed if row[11] == "record_logged_twice")
    assert twice["logged 3 times in 2 file(s)"] == 1 and twice["logged 2 times in 2 file(s)"] >= 14, twice
    assert twice["logged 2 times in 1 file(s)"] >= 1, twice
    m.unpersist()


def test_the_walk_tells_apart_partitions_of_one_hash(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every walk row of one role under one hash (as if every window partition's hash collided): the rows of the
    partitions interleave in the walk's sort, and it still finds what the window frames find."""
    monkeypatch.setattr(rules, "walk_hash", lambda kind, keys: F.lit(7).cast("long"))
    lines = spark.createDataFrame([(logformat.dumps(r), f) for r, f in _hostile_log()], "value string, file string")
    m = parse.messages(parse.parse(lines)).cache()
    walked = Counter(tuple(r) for r in rules.all_violations(m, walked=True).collect())
    framed = Counter(tuple(r) for r in rules.all_violations(m).collect())
    assert walked == framed
    assert {"shard_gap", "shard_order", "duplicate", "cam_rate"} <= {row[11] for row in framed}
    m.unpersist()


def _one_long_publication() -> list[tuple[str, str]]:
    """A traffic light's day in small: ~4,000 messages of one publication and shard (loggen.traffic), with a
    received record missing every 400th (shard gaps), a body of the one before every 300th (copies), the
    shardSeqs of two deliveries swapped every 350th (order), a record logged twice, and one logged again in
    another file with another body (the first file's is the one kept): (line, file) pairs."""
    records = [json.loads(line) for line in loggen.traffic(8_000, publications=1)]
    out: list[dict[str, object]] = []
    received_n = sent_n = 0
    for record in records:
        if record["event"] == "received_message":
            received_n += 1
            if received_n % 400 == 0:
                continue
            if received_n % 300 == 0 and out:
                last = next(r for r in reversed(out) if r["event"] == "received_message")
                record["bodySha256"] = last["bodySha256"]
        elif record["event"] == "sent_message":
            sent_n += 1
            if sent_n % 350 == 0:
                earlier = next(r for r in reversed(out) if r["event"] == "sent_message")
                earlier["shardSeq"], record["shardSeq"] = record["shardSeq"], earlier["shardSeq"]
        out.append(record)
    twice = next(r for r in out[100:] if r["event"] == "received_message")
    other = next(r for r in out[200:] if r["event"] == "received_message")
    again = [(json.dumps(twice), "a.jsonl"), (json.dumps({**other, "bodySha256": twice["bodySha256"]}), "b.jsonl")]
    return [(json.dumps(r), "a.jsonl") for r in out] + again


def _spilled_bytes(rows: DataFrame) -> int:
    """What the sort of the walk's rows spilled to disk (its plan's final Sort, once the walk ran)."""
    sort = rows._jdf.queryExecution().executedPlan().finalPhysicalPlan()
    assert sort.nodeName() == "Sort"
    return int(sort.metrics().apply("spillSize").value())


def test_a_publication_longer_than_the_sort_holds_is_walked(spark: SparkSession) -> None:
    """The walk keeps no partition's rows: a publication of ~4,000 messages (each a row of its publication, of
    its shard and of its link), where the tests' sorts hold 1,000 rows (TEST_CONF), comes from a sort that
    spilled, and the walk finds in it what the window frames find."""
    m = parse.messages(parse.parse(spark.createDataFrame(_one_long_publication(), "value string, file string"))).cache()
    walks: list[rules.Walk] = []
    walked = Counter(tuple(r) for r in rules.all_violations(m, walks=walks, walked=True).collect())
    framed = Counter(tuple(r) for r in rules.all_violations(m).collect())
    assert walked == framed
    checked = walks[0].checked()
    assert min(checked["shard_gap"], checked["shard_order"], checked["duplicate"], checked["cam_rate"]) > 3_500
    assert _spilled_bytes(walks[0].rows) > 0
    checks = Counter(row[11] for row in framed)
    assert checks["shard_gap"] >= 9 and checks["shard_order"] >= 10 and checks["duplicate"] >= 10, checks
    assert checks["record_logged_twice"] == 2, checks  # the one logged again with another body too
    m.unpersist()


def test_generated_traffic_has_a_small_share_of_each_fault(spark: SparkSession, tmp_path: Path) -> None:
    """The benchmarks' log (loggen.traffic) is mostly conforming: each fault it makes on ~1 % of the
    messages it applies to, none on most (every SPATEM lacking its MAPEM, half of the CAMs too early,
    was a generator fault, not a broker's)."""
    lines = spark.createDataFrame([(line, "mem") for line in loggen.traffic(12_000)], "value string, file string")
    run = validate(spark, parse.messages(parse.parse(lines)), str(tmp_path / "out"), "traffic", cache_input=True)
    share = {(m.rule, m.check): m.violations / m.checked for m in run.metrics if m.checked}
    assert max(share.values()) < 0.03, share
    faults = [("IP_022", "properties"), ("IP_016", "rejected"), ("IP_032", "dropped"),
              ("IP_033", "expired_undelivered"), ("IP_012", "latency"), ("IP_104", "spatem_after_mapem"),
              ("IP_124", "cam_rate"), ("IP_136", "cpm_rate")]
    assert all(share[fault] > 0.002 for fault in faults), share
