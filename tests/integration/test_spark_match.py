"""`audit match`: a selector what-if. The selector compiled to a Spark column agrees with the broker's
own evaluation (jms_selectors) on logged messages, and on a log written by a real node the what-if
count equals what a consumer attached with that selector received; a selector the broker refuses is
refused with the broker's error."""
from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Delivery, Message
from pyspark.sql import SparkSession

import jms_selectors
from interchange.testing.broker_harness import BrokerUnderTest, running_broker, selector_option
from certs import TestPki
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.ground import logformat
from spark import loggen, parse, selector_sql
from spark.cli import main
from spark.match import match

SELECTORS = (
    "messageType = 'DENM' AND causeCode BETWEEN 1 AND 5",
    "messageType IN ('CAM', 'CPM') OR longitude > 4.7",
    "quadTree LIKE '%,1202021%' AND NOT originatingCountry = 'NL'",
    "\"custom-nl-lane\" = 'a' OR \"custom-nl-lane\" IS NULL",
    "causeCode * 2 + 1 >= 7.5 OR subCauseCode / 2 = 1",
    "latitude NOT BETWEEN 50 AND 52 OR stationType <> 5",
    "publisherId LIKE 'NL\\_%' ESCAPE '\\' OR flag",
    "flag = TRUE AND causeCode <> 'x'",
    "vehicleRole > 2 AND vehicleRole < 10 OR name NOT IN ('main')",
    "",
)


def _props(rng: random.Random, i: int) -> dict[str, object]:
    message_type = rng.choice(["DENM", "CAM", "CPM", "IVIM", "MAPEM"])
    props = loggen.properties(message_type, rng.choice(["NL00001", "NL_0002", "DE00003"]), str(i))
    props["originatingCountry"] = rng.choice(["NL", "DE"])
    props["longitude"] = rng.choice([4.5, 4.7, 4.9, 5])
    props["latitude"] = rng.choice([49.5, 51.0, 52.5])
    props["quadTree"] = rng.choice([",1202021012323002,", ",0313322133233222,"])
    for name, values in (("causeCode", [0, 1, 3, 5, 6, 9, -1]), ("subCauseCode", [2, 3, 4]),
                         ("custom-nl-lane", ["a", "b", 1]), ("flag", [True, False, "yes"]),
                         ("stationType", [5, 7]), ("vehicleRole", [1, 3, 12]), ("name", [",main,", "main"])):
        if rng.random() < 0.6:
            props[name] = rng.choice(values)
        else:
            props.pop(name, None)
    return props


def test_the_spark_column_selects_what_the_broker_selects(spark: SparkSession) -> None:
    rng = random.Random(66)
    sets = [_props(rng, i) for i in range(300)]
    records = [loggen.received(loggen.Message("ixc-m", i + 1, 1_795_000_000_000 + i, props)) for i, props in enumerate(sets)]
    lines = spark.createDataFrame([(logformat.dumps(r), "mem") for r in records], "value string, file string")
    messages = parse.messages(parse.parse(lines)).cache()
    for text in SELECTORS:
        selector = jms_selectors.compile(text)
        # the broker's view: the values as the log has them (JSON: int exact, float approximate)
        expected = [loggen.message_id("ixc-m", i + 1) for i, props in enumerate(sets)
                    if selector.matches(json.loads(json.dumps(logformat.json_properties(props))))]
        got = sorted(r.messageId for r in messages.where(selector_sql.matches(text)).select("messageId").collect())
        assert got == sorted(expected), text
        assert 0 < len(expected) < len(sets) or text == ""


@pytest.fixture
def node(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    with running_broker(pki, tmp_path, [TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                        [SourceSpec(address="all", consumers=frozenset({"actor-2"}))]) as broker:
        yield broker


WHAT_IF = "messageType = 'DENM' AND (causeCode BETWEEN 2 AND 6 OR \"custom-nl-lane\" IN ('a')) AND longitude > 4.6"


def test_the_what_if_equals_what_a_consumer_with_the_selector_received(
        spark: SparkSession, node: BrokerUnderTest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    consumer = node.connect("actor-2")
    receiver = consumer.create_receiver("all", credit=200, options=selector_option(WHAT_IF))
    publisher = node.connect("actor-1")
    sender = publisher.create_sender("in")
    rng = random.Random(7)
    sent = 0  # admitted (the node rejects a message breaking the profile: not in the what-if either)
    for i in range(80):  # valid messages, some of which the selector selects
        props = loggen.properties(rng.choice(["DENM", "DENM", "CAM"]), "NL00001", str(i),
                                  longitude=rng.choice([4.5, 4.7, 4.9]), causeCode=rng.choice([1, 3, 6, 9]),
                                  **({"custom-nl-lane": rng.choice(["a", "b"])} if rng.random() < 0.5 else {}))
        delivery = sender.send(Message(body=f"m{i}".encode(), properties=props, inferred=True), error_states=[])
        sent += delivery.remote_state == Delivery.ACCEPTED
    received = 0
    while True:
        try:
            receiver.receive(timeout=1.0)
        except Exception:  # proton's Timeout: nothing more for this selector
            break
        receiver.accept()
        received += 1
    publisher.close()
    consumer.close()
    deadline = time.monotonic() + 10
    while sum(1 for line in node.log_path.read_text().splitlines() if '"received_message"' in line) < sent:
        assert time.monotonic() < deadline, "the node did not log every message"
        time.sleep(0.1)
    assert 5 < received < sent
    summary = match(spark, [str(node.log_path)], WHAT_IF)
    assert summary.matched == received and summary.evaluated == summary.received == sent
    assert sum(g.messages for g in summary.groups) == received and all(g.message_type == "DENM" for g in summary.groups)
    assert main(["match", "--input", str(node.log_path), "--selector", WHAT_IF, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["matched"] == received


def test_a_selector_the_broker_refuses_is_refused_with_its_error(spark: SparkSession, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "node.jsonl"
    log.write_text(loggen.lines([loggen.received(loggen.Message("ixc-m", 1, 1_795_000_000_000,
                                                                 loggen.properties("DENM")))]))
    bad = "causeCode IN (1, 2)"
    with pytest.raises(jms_selectors.SelectorError) as refused:
        jms_selectors.compile(bad)
    assert main(["match", "--input", str(log), "--selector", bad]) == 2
    assert f"--selector: {refused.value}" in capsys.readouterr().err
