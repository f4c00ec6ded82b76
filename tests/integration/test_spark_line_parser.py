"""The ingest's Java line parser (spark/jvm, through spark.parse in a real session): the edges of "exactly one
JSON object" and the text and kind of each value, beyond the oracle's hostile lines; the byte scanner that reads
the plain records against the strict (Jackson) reading alone, line by line; the ingest's rows (built in Java in the
messages table's layout) against the reference in Spark SQL."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark import loggen, parse, tables
from spark.ingest import read_lines
from spark.session import settings

_OK = ('{"schemaVersion":2,"timestamp":"2026-11-30T00:00:00.000Z","timestampMs":1796000000000,"level":"info",'
       '"event":"connect","node":"ixc-o"')

#: (line, the reason's start; None: a record)
CASES = [
    (_OK + "}]x", parse.TRAILING),  # an object, then more: not a record even where "[<line>]" reads one
    (_OK + "},", parse.TRAILING),
    ("{} {}", parse.TRAILING),
    ("1,2", parse.NOT_OBJECT),
    ('"a"', parse.NOT_OBJECT),
    ("null", parse.NOT_OBJECT),
    ("\ufeff", parse.TRAILING),  # a byte order mark and nothing: no value
    (" \t" + _OK + "} \r", None),  # JSON whitespace around the object
    (_OK + ',"details":{"x":"\\\\ud800"}}', None),  # an escaped backslash, then text
    (_OK + ',"details":{"x":"\\ud83d\\ude00"}}', None),  # a pair
    (_OK + ',"details":{"x":"\\\\\\udc00"}}', parse.SURROGATE),  # an escaped backslash, then a lone low half
    (_OK + ',"details":{"x":"\\ud83dx"}}', parse.SURROGATE),
    (_OK + ',"x":{"y":Infinity}}', parse.NON_NUMBER),
    (_OK + ',"x":"a\tb"}', parse.MALFORMED),  # a control character unescaped
    (_OK + ',"x":01}', parse.MALFORMED),
    (_OK + ",'x':1}", parse.MALFORMED),
    (_OK + ',"x":[1,{"y":-2e400}]}', f"{parse.OUT_OF_RANGE}: -2e400"),
    (_OK + ',"x":1e300,"y":"1e400"}', None),
    (_OK + ',"event":"x","details":{"b":1,"b":2},"node":"y"}', f"{parse.DUPLICATE_KEY}: event, node, details.b"),
    (_OK + ',"applicationProperties":{"a":{"a":1,"a":2}}}', None),  # only the record and its two objects are checked
    (_OK + ',"applicationProperties":{"messageType":"DENM","x-a":1,"messageType":"IVIM","x-a":2,"x-a":3}}',
     f"{parse.DUPLICATE_KEY}: applicationProperties.messageType, applicationProperties.x-a"),  # tables 1-7's and others
    (_OK.replace('"schemaVersion":2', '"schemaVersion":"2"') + "}", None),
    (_OK.replace('"schemaVersion":2', '"schemaVersion":0') + "}", parse.VERSION_MISSING),
    (_OK.replace('"level":"info"', '"level":"loud"') + "}", "level missing or unknown"),
    (_OK.replace('"event":"connect"', '"event":""') + "}", "event missing"),
]


@pytest.fixture(scope="module")
def parsed(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[int, object]:
    path = tmp_path_factory.mktemp("lines") / "lines.jsonl"
    lines = [line for line, _ in CASES]
    lines.append(_OK.replace('"event":"connect"', '"event":"received_message"') + ',"applicationProperties":'
                 '{"messageType":"DENM","causeCode":3,"x-f":1e5,"x-g":1.50,"x-n":null,"x-b":true,"x-big":12345678901234567890,'
                 '"x-o":{"p":[1,2.0e1,"s\\"q"]},"x-a":[ ],"quad\\u0054ree":"t"},"details":{"reason":"r","n":-0}}')
    path.write_bytes(b"".join(line.encode("utf-8") + b"\n" for line in lines)
                     + (_OK + ',"x":"').encode() + b"\xc0\xaf" + b'"}\n')
    parsed = parse.parse(read_lines(spark, [str(path)]))
    # a map's order is Spark's (a Python dict of a collected row has its own): its keys as an array
    rows = parsed.withColumn("otherNames", F.map_keys(parse.OTHER_PROPERTIES)).collect()
    assert len(rows) == len(lines) + 1
    return {i: row for i, row in enumerate(rows)}  # one file, one task: the lines' order


def test_each_line_is_a_record_or_corrupt_with_its_reason(parsed: dict[int, object]) -> None:
    for i, (line, reason) in enumerate(CASES):
        found = parsed[i].corruptReason  # type: ignore[attr-defined]
        if reason is None:
            assert found is None, (line, found)
        else:
            assert found is not None and found.startswith(reason), (line, found)
    assert parsed[len(CASES) + 1].corruptReason == parse.NOT_UTF8  # type: ignore[attr-defined]  # an overlong encoding


def test_values_as_text_and_kinds_as_written(parsed: dict[int, object]) -> None:
    row = parsed[len(CASES)]
    assert row.corruptReason is None  # type: ignore[attr-defined]
    # each property once: the other properties in the two maps, in the order written (the values as Spark's
    # from_json reads a string column: numbers as Jackson reads them, structures compact) ...
    props, kinds = getattr(row, parse.OTHER_PROPERTIES), getattr(row, parse.OTHER_KINDS)
    assert props == {"x-f": "100000.0", "x-g": "1.5", "x-n": None, "x-b": "true", "x-big": "12345678901234567890",
                     "x-o": '{"p":[1,20.0,"s\\"q"]}', "x-a": "[]"}
    assert kinds == {"x-f": "float", "x-g": "float", "x-n": "null", "x-b": "boolean", "x-big": "integer", "x-o": "object",
                     "x-a": "array"}
    assert row.otherNames == ["x-f", "x-g", "x-n", "x-b", "x-big", "x-o", "x-a"]  # type: ignore[attr-defined]
    assert dict(getattr(row, parse.DETAILS_MAP)) == {"reason": "r", "n": "0"}
    # ... tables 1-7's by name in the structs
    standard, standard_kinds = getattr(row, parse.STANDARD), getattr(row, parse.STANDARD_KINDS)
    assert (standard.messageType, standard.causeCode, standard.quadTree) == ("DENM", "3", "t")
    assert (standard_kinds.messageType, standard_kinds.causeCode, standard_kinds.quadTree) == ("string", "integer", "string")
    assert (standard_kinds.publisherId, standard.publisherId) == (None, None)


#: A record the byte scanner reads (no key twice, no structure returned as text, no escape in a key), with
#: escapes, raw UTF-8, floats, -0 and whitespace in it.
_SCANNED = (_OK.replace('"event":"connect"', '"event":"received_message"')
            + ' , "applicationProperties" : {"messageType":"DENM","latitude":51.480,"longitude":-0.0,"x-s":"a\\/b\\u00e9",'
            '"x-e":1E-3,"x-i":-0,"x-t":false},"details":{"q":"s\\"q\\\\ \\u00e9\\ud83d\\ude00\\n\\t","raw":"é€😀",'
            '"n":null},"extra":[1,{"a":[true,null,"x\\"y",{}],"b":2.5e10},[]]}\t')


def test_escapes_and_numbers_of_a_scanned_record(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "scanned.jsonl"
    path.write_text(_SCANNED + "\n", encoding="utf-8")
    [row] = parse.parse(read_lines(spark, [str(path)])).collect()
    assert row.corruptReason is None
    assert dict(getattr(row, parse.DETAILS_MAP)) == {"q": 's"q\\ \u00e9\U0001f600\n\t', "raw": "é€😀", "n": None}
    standard, kinds = getattr(row, parse.STANDARD), getattr(row, parse.STANDARD_KINDS)
    assert (standard.latitude, standard.longitude, kinds.latitude) == ("51.48", "-0.0", "float")
    assert dict(getattr(row, parse.OTHER_PROPERTIES)) == {"x-s": "a/b\u00e9", "x-e": "0.001", "x-i": "0", "x-t": "false"}
    assert dict(getattr(row, parse.OTHER_KINDS)) == {"x-s": "string", "x-e": "float", "x-i": "integer", "x-t": "boolean"}


def _mutated(lines: list[str], count: int, seed: int = 25) -> list[bytes]:
    """``count`` lines each a little broken: one to three bytes replaced, inserted or deleted (JSON's own characters,
    digits, letters of its literals, a non-ASCII one)."""
    rng = random.Random(seed)
    alphabet = [bytes([c]) for c in b'{}[]",:\\ \t\r0123456789-+.eEtrufalsnux'] + ["é".encode()]
    out = []
    for _ in range(count):
        line = bytearray(rng.choice(lines).encode())
        for _ in range(rng.randint(1, 3)):
            at, op, char = rng.randrange(len(line) + 1), rng.randrange(3), rng.choice(alphabet)
            if op == 0:
                line[at:at + 1] = char
            elif op == 1:
                line[at:at] = char
            else:
                del line[at:at + 1]
        out.append(bytes(line))
    return out


def test_the_scanner_reads_every_line_as_the_strict_path_does(spark: SparkSession, tmp_path: Path) -> None:
    """The function ingest calls (the byte scanner for plain records, Jackson for the rest) and the reference
    (Jackson for every line) give the same row, reason and every value, on generated traffic, the cases above and
    thousands of lines broken at random."""
    lines = [*loggen.traffic(1500), *(line for line, _ in CASES), _SCANNED,
             loggen.lines([loggen.event_record("ii_update", "ixc-a", 1, nested={"a": [1, 2.5]}, text="x\\y")]).strip()]
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in [*(line.encode() for line in lines), *_mutated(lines, 6000)]))
    texts = read_lines(spark, [str(path)])
    parse.register_parser(spark)
    options = {"ignoreNullFields": "false"}
    compared = texts.select(
        "value", F.to_json(F.call_function(parse.PARSE_FUNCTION, F.col("value")), options).alias("read"),
        F.to_json(F.call_function(parse.REFERENCE_FUNCTION, F.col("value")), options).alias("reference"))
    differing = compared.where(~F.col("read").eqNullSafe(F.col("reference"))).limit(5).collect()
    assert differing == []
    counts = compared.select(F.count("*").alias("lines"),
                             F.count(F.when(F.get_json_object("read", "$.reason").isNull(), 1)).alias("records")).first()
    assert counts is not None and counts.records > 1500 and counts.lines - counts.records > 1000


def _typed_records() -> list[str]:
    """Message records whose values are of the wrong type, out of range, or only in v1's fields or the properties."""
    base = {"schemaVersion": 2, "timestamp": "2026-11-30T00:00:00.000Z", "level": "info", "event": "received_message",
            "node": "ixc-t", "messageId": "m", "address": "a", "identity": "i"}
    v1 = {"schemaVersion": 1, "timestamp": "2026-11-23T10:00:00.050+02:00", "level": "info", "event": "sent_message",
          "node": "ixc-old", "address": "src", "identity": "actor-2", "arrivalTime": "2026-11-23T10:00:00.010Z",
          "departureTime": "2026-11-23 10:00:00.05", "size": 204,
          "applicationProperties": {"messageType": "DENM", "publicationId": "NL00001:7", "shardId": "2"}}
    records = [
        v1, {**v1, "event": "expired_message", "departureTime": "not a time", "size": "204"},
        {**v1, "event": "dropped_message", "source": "s", "consumer": "c", "shardId": "x"},
        {**base, "attempt": 1.5, "size": " 12 ", "shardSeq": "7", "process": "x", "settledMs": 1e3,
         "expiryMs": "99999999999999999999", "arrivalMs": -62_135_596_800_001, "arrivalTime": "0001-01-01T00:00:00Z",
         "departureMs": "1796000000000", "shardId": 3.0},
        {**base, "timestampMs": 1_796_000_000_000, "timestamp": None, "node": None, "applicationProperties": [],
         "details": {"reason": "r"}},
        {**base, "event": "rejected_message", "details": {"reason": "from details"}, "applicationProperties": None},
        {**base, "event": "rejected_message", "reason": "top", "details": {"reason": None}, "attempt": "2147483648"},
        {**base, "schemaVersion": 3}, {**base, "schemaVersion": "x"}, {**base, "timestamp": "9999-12-31T23:59:59.9999Z"},
        {**base, "timestamp": "0001-01-01T00:00:00.000Z", "arrivalTime": "10000-01-01T00:00:00Z"},
        {**base, "event": "ii_update"}, {**base, "level": None},
    ]
    return [json.dumps(record) for record in records]


def test_the_ingest_rows_are_the_reference_rows(spark: SparkSession, tmp_path: Path) -> None:
    """The ingest's rows (:func:`spark.parse.message_rows`: one Java function builds each message's row in the
    messages table's layout and keeps the others aside) are those of the reference, :func:`spark.parse.parse` and
    :func:`spark.parse.messages` in Spark SQL: every column of every message and every row kept aside, on generated
    traffic, v1 records, values of the wrong type or out of range, the cases above, a line over MAX_LINE_BYTES and
    thousands of lines broken at random."""
    lines = [*loggen.traffic(1500, seed=4), *(line for line, _ in CASES), _SCANNED, *_typed_records()]
    path = tmp_path / "lines.jsonl"
    too_long = '{"schemaVersion":2,"x":"' + "\u00e9" * (parse.MAX_LINE_BYTES // 2) + '"}'
    path.write_bytes(b"".join(line + b"\n" for line in [*(line.encode() for line in lines), *_mutated(lines, 5000),
                                                          too_long.encode()]))
    texts = read_lines(spark, [str(path)])
    options = {"ignoreNullFields": "false"}

    def texts_of(frame: DataFrame) -> list[str]:
        return sorted(row[0] for row in frame.select(F.to_json(F.struct("*"), options)).collect())

    reference = parse.parse(texts)
    messages = texts_of(parse.messages(reference))
    assert parse.messages(reference).schema.names == tables.MESSAGES.names
    others = texts_of(reference.where(~parse.is_message(F.col("corruptReason"), F.col("r"))).withColumn(
        "value", F.when(F.col("corruptReason").isNotNull(), F.col("value"))))
    # the function's generated code (the audit session's) and its interpreted path (the tests' session)
    for conf in ({"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "CODEGEN_ONLY"}, {}):
        with settings(spark, conf):
            rows, aside = parse.message_rows(texts, 1 << 30, 1 << 30)
            ingested = texts_of(rows)
        assert rows.schema == parse.messages(reference).schema  # nullability too: the files' columns
        assert ingested == messages and len(ingested) > 3000
        kept = aside.rows()
        assert kept is not None
        reasons = [row.corruptReason for row in kept.select("corruptReason").collect() if row.corruptReason is not None]
        for reason in (parse.TOO_LONG, parse.VERSION_UNKNOWN_PREFIX, parse.VERSION_MISSING, parse.TIMESTAMP_MISSING,
                       parse.EVENT_MISSING, parse.LEVEL_MISSING, parse.MALFORMED):
            assert any(kept_reason.startswith(reason) for kept_reason in reasons), reason
        assert texts_of(kept) == others and len(others) > 1000
