"""Interop with a third-party AMQP 1.0 client: rhea (pure JavaScript, shares no code with proton).

Every other broker test uses proton clients, which could hide a protocol mistake proton makes on
both sides. Here rhea (``tests/interop/rhea_client.js``, pinned in ``tests/interop/package-lock.json``,
installed by ``scripts/setup.sh``) connects over real TLS 1.3 with a client certificate and SASL
EXTERNAL, publishes and consumes, and proton sits on the other side to check the bytes.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message, Timeout, byte, char, float32, int32, short, symbol, timestamp, ubyte, uint, ulong, ushort

from certs import TestPki
from certs.tls import TlsFiles
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.broker_harness import (
    BROKER_CN,
    BrokerUnderTest,
    complete_records,
    denm,
    ivim,
    running_broker,
    send_raw,
)
from test_broker_bi import RawCollector
from interchange.testing.paths import REPO_ROOT

INTEROP_DIR = (REPO_ROOT / "tests") / "interop"
CLIENT = INTEROP_DIR / "rhea_client.js"
RHEA_TIMEOUT_MS = 10_000

TARGETS = [TargetSpec(address="in", publishers=frozenset({"actor-1"}))]
SOURCES = [SourceSpec(address="all", consumers=frozenset({"actor-2", "actor-3"}))]


@pytest.fixture(scope="module")
def node_binary() -> str:
    """node and the locked rhea must be installed (scripts/setup.sh does it): fail, never skip."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: run `bash scripts/setup.sh` (the test command does)")
    locked = json.loads((INTEROP_DIR / "package-lock.json").read_text())["packages"]["node_modules/rhea"]["version"]
    installed = INTEROP_DIR / "node_modules" / "rhea" / "package.json"
    if not installed.is_file():
        pytest.fail(f"rhea is not installed in {INTEROP_DIR}/node_modules: run `bash scripts/setup.sh`")
    version = json.loads(installed.read_text())["version"]
    if version != locked:
        pytest.fail(f"rhea {version} installed but {locked} locked: run `bash scripts/setup.sh`")
    return node


@pytest.fixture
def broker(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    with running_broker(pki, tmp_path, TARGETS, SOURCES) as b:
        yield b


# ------------------------------------------------------------------------------------ rhea runner
def rhea_spec(broker: BrokerUnderTest, cn: str | None, **fields: Any) -> dict[str, Any]:
    """Connection settings for rhea_client.js: TLS to the broker's CN with ``cn``'s certificate."""
    files = TlsFiles.from_pki(broker.pki.directory, cn or "actor-1", with_crls=False)
    spec: dict[str, Any] = {"port": broker.port, "servername": BROKER_CN, "ca": str(files.trust_bundle),
                            "timeout_ms": RHEA_TIMEOUT_MS}
    if cn is not None:
        spec.update(cert=str(files.cert_chain), key=str(files.key))
    spec.update(fields)
    return spec


def rhea_command(node: str) -> list[str]:
    return [node, str(CLIENT), "-"]  # the spec goes on stdin: large bodies exceed argv limits


def events_of(stdout: str, stderr: str) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]
    except json.JSONDecodeError:
        pytest.fail(f"rhea_client.js printed something else than JSON lines:\n{stdout}\n{stderr}")


def run_rhea(node: str, spec: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """Run rhea_client.js to its end (it bounds itself by timeout_ms) and return (exit code, events)."""
    done = subprocess.run(rhea_command(node), input=json.dumps(spec), capture_output=True, text=True,
                          timeout=spec["timeout_ms"] / 1000 + 10)
    events = events_of(done.stdout, done.stderr)
    assert not [e for e in events if e["event"] == "timeout"], f"rhea timed out: {events}\n{done.stderr}"
    return done.returncode, events


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def typed(kind: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "value": value}


def denm_properties(**extra: Any) -> dict[str, Any]:
    """A valid DENM's application properties with the AMQP types the tables ask for, for rhea."""
    properties = {name: typed("string", value) for name, value in denm().properties.items()
                  if isinstance(value, str)}
    properties.update(causeCode=typed("ubyte", 1), subCauseCode=typed("int", 0),
                      latitude=typed("double", 51.485992), longitude=typed("double", 4.735311))
    properties.update(extra)
    return properties


# Every type rhea can put in application properties (decimals it defines but cannot encode), with
# what proton must decode: (rhea type, value as JSON for rhea, proton value of the right class).
EVERY_TYPE = {
    "custom-test-ubyte": ("ubyte", 255, ubyte(255)),
    "custom-test-ushort": ("ushort", 65535, ushort(65535)),
    "custom-test-uint": ("uint", 4294967295, uint(4294967295)),
    "custom-test-smalluint": ("uint", 7, uint(7)),
    "custom-test-uint0": ("uint", 0, uint(0)),
    "custom-test-ulong": ("ulong", str(2**64 - 1), ulong(2**64 - 1)),
    "custom-test-smallulong": ("ulong", 200, ulong(200)),
    "custom-test-ulong0": ("ulong", 0, ulong(0)),
    "custom-test-byte": ("byte", -128, byte(-128)),
    "custom-test-short": ("short", -32768, short(-32768)),
    "custom-test-int": ("int", -2**31, int32(-2**31)),
    "custom-test-smallint": ("int", -5, int32(-5)),
    "custom-test-long": ("long", str(-2**63), -2**63),
    "custom-test-smalllong": ("long", -100, -100),
    "custom-test-float": ("float", 1.5, float32(1.5)),
    "custom-test-double": ("double", 2.25, 2.25),
    "custom-test-true": ("boolean", True, True),
    "custom-test-false": ("boolean", False, False),
    "custom-test-null": ("null", None, None),
    "custom-test-char": ("char", "é", char("é")),
    "custom-test-timestamp": ("timestamp", 1_700_000_000_123, timestamp(1_700_000_000_123)),
    "custom-test-uuid": ("uuid", str(uuid.UUID(int=42)), uuid.UUID(int=42)),
    "custom-test-binary": ("binary", "00ff", b"\x00\xff"),
    "custom-test-symbol": ("symbol", "sym", symbol("sym")),
    "custom-test-string": ("string", "ünïcødé", "ünïcødé"),
    "custom-test-longstring": ("string", "x" * 300, "x" * 300),  # str32
}
# Plain JSON values: rhea picks the AMQP type itself (what most rhea applications do).
INFERRED = {
    "custom-test-inferred-uint": (7, uint(7)),
    "custom-test-inferred-int": (-7, int32(-7)),
    "custom-test-inferred-ulong": (2**40, ulong(2**40)),
    "custom-test-inferred-double": (0.5, 0.5),
    "custom-test-inferred-bool": (True, True),
    "custom-test-inferred-string": ("s", "s"),
}


# ------------------------------------------------------------------------------------ (a) both ways
def test_rhea_publishes_every_type_proton_receives_byte_exact(node_binary: str, broker: BrokerUnderTest) -> None:
    properties = denm_properties(**{name: typed(kind, value) for name, (kind, value, _) in EVERY_TYPE.items()})
    properties.update({name: value for name, (value, _) in INFERRED.items()})
    bodies = [bytes(range(256)) * 4, b"", b"\x00" * 5000, bytes(range(256)) * 1200]  # the last spans frames
    consumer = broker.connect("actor-3")
    collector = RawCollector()
    receiver = consumer.create_receiver("all", credit=10, handler=collector)  # keep a reference: its __del__ detaches
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-1", mode="publish", address="in", messages=[
        {"application_properties": properties, "body_hex": body.hex(), "ttl": 60000, "durable": True}
        for body in bodies]))
    assert code == 0, events
    assert [(e["index"], e["outcome"]) for e in of(events, "outcome")] == [(i, "accepted") for i in range(len(bodies))]
    consumer.wait(lambda: len(collector.raw) == len(bodies), timeout=10, msg="not all messages arrived")
    # Byte for byte what rhea put on the wire (IP_014/015), every section included.
    assert [raw.hex() for raw in collector.raw] == [e["encoded_hex"] for e in of(events, "sent")]
    for raw, body in zip(collector.raw, bodies):
        message = Message()
        message.decode(raw)
        assert bytes(message.body) == body and message.ttl == 60 and message.durable
        got = message.properties
        for name, (_, _, expected) in EVERY_TYPE.items():
            value = bytes(got[name]) if isinstance(got[name], memoryview) else got[name]  # proton: binary as a view
            assert value == expected and type(value) is type(expected), name
        for name, (_, expected) in INFERRED.items():
            assert got[name] == expected and type(got[name]) is type(expected), name
        assert got["messageType"] == "DENM" and type(got["causeCode"]) is ubyte
    receiver.close()
    consumer.close()


def _proton_every_type(body: bytes) -> Message:
    props = denm().properties
    props.update({name: expected for name, (_, _, expected) in EVERY_TYPE.items()})
    return Message(body=body, properties=props, inferred=True, ttl=60, durable=True, subject="s",
                   annotations={symbol("x-opt-test"): "annotation"})


# What rhea's decoder reports for proton's encoding of EVERY_TYPE: (rhea type name, JSON value).
RHEA_SEES = {
    "custom-test-ubyte": ("Ubyte", 255), "custom-test-ushort": ("Ushort", 65535),
    "custom-test-uint": ("Uint", 4294967295), "custom-test-smalluint": ("SmallUint", 7),
    "custom-test-uint0": ("Uint0", 0), "custom-test-ulong": ("Ulong", {"hex": "ff" * 8}),
    "custom-test-smallulong": ("SmallUlong", 200), "custom-test-ulong0": ("Ulong0", 0),
    "custom-test-byte": ("Byte", -128), "custom-test-short": ("Short", -32768),
    "custom-test-int": ("Int", -2**31), "custom-test-smallint": ("SmallInt", -5),
    "custom-test-long": ("Long", {"hex": "80" + "00" * 7}), "custom-test-smalllong": ("SmallLong", -100),
    "custom-test-float": ("Float", 1.5), "custom-test-double": ("Double", 2.25),
    "custom-test-true": ("True", True), "custom-test-false": ("False", False),
    "custom-test-null": ("Null", None), "custom-test-char": ("CharUTF32", ord("é")),
    "custom-test-timestamp": ("Timestamp", 1_700_000_000_123),
    "custom-test-uuid": ("Uuid", {"hex": uuid.UUID(int=42).hex}),
    "custom-test-binary": ("Vbin8", {"hex": "00ff"}), "custom-test-symbol": ("Sym8", "sym"),
    "custom-test-string": ("Str8", "ünïcødé"), "custom-test-longstring": ("Str32", "x" * 300),
}


def test_proton_publishes_rhea_consumes_byte_exact(node_binary: str, broker: BrokerUnderTest) -> None:
    bodies = [bytes(range(256)) * 4, b"", bytes(range(256)) * 1200]
    payloads = [_proton_every_type(body).encode() for body in bodies]
    publisher = broker.connect("actor-1")
    assert [d.remote_state for d in send_raw(publisher, "in", payloads)] == [Delivery.ACCEPTED] * len(payloads)
    publisher.close()
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-2", mode="consume", address="all",
                                                   count=len(payloads)))
    assert code == 0, events
    messages = of(events, "message")
    assert [m["raw_hex"] for m in messages] == [p.hex() for p in payloads]  # forwarded byte for byte
    assert [m["body_hex"] for m in messages] == [b.hex() for b in bodies]  # rhea sees one data section
    for m in messages:
        props = m["application_properties"]
        assert props["messageType"] == typed("Str8", "DENM")
        for name, (kind, value) in RHEA_SEES.items():
            assert props[name] == typed(kind, value), name


# ------------------------------------------------------------------------------------ (b) selector
def _ivim_body(message: Message, body: bytes) -> Message:
    message.body = body
    return message


SELECTOR = "messageType = 'DENM' AND quadTree LIKE '%,1202%'"


def test_rhea_selector_gets_only_matching_and_filter_is_echoed(node_binary: str, broker: BrokerUnderTest) -> None:
    # rhea attaches first (live delivery); proton publishes once the attach is answered.
    process = subprocess.Popen(rhea_command(node_binary), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(rhea_spec(broker, "actor-2", mode="consume", address="all",
                                                 selector=SELECTOR, count=2, linger_ms=700)))
        process.stdin.close()
        lines = []
        deadline = time.monotonic() + RHEA_TIMEOUT_MS / 1000
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(json.loads(line))
            if lines[-1]["event"] == "attached":
                break
        attached = of(lines, "attached")
        assert attached, lines
        # The broker echoes the filter it applies (IP_066): same key, descriptor and text.
        assert attached[0]["source"] == {"address": "all", "filter": {"jms-selector": {
            "type": "Str8", "value": SELECTOR, "descriptor": {"type": "Ulong", "value": 0x0000468C00000004}}}}
        publisher = broker.connect("actor-1")
        sender = publisher.create_sender("in")
        sender.send(_ivim_body(ivim(), b"ivim"))
        sender.send(denm(body=b"match-1"))  # ,120202130121133020,
        sender.send(denm(quad_tree=",031332213323322232,", body=b"elsewhere"))
        sender.send(_ivim_body(ivim(quad_tree=",120202130121133020,"), b"ivim-here"))
        sender.send(denm(quad_tree=",031332213323322232,120233333333333333,", body=b"match-2"))
        publisher.close()
        stdout = process.stdout.read()  # to its end: rhea_client.js bounds itself by timeout_ms
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.stderr is not None
    events = lines + events_of(stdout, process.stderr.read())
    assert process.returncode == 0, events
    # count=2, then 700 ms more to catch anything that should not have come
    assert [bytes.fromhex(m["body_hex"]) for m in of(events, "message")] == [b"match-1", b"match-2"]
    # what the selector did not take is still there for other consumers (queue semantics)
    assert broker.call(lambda: broker.node.core.sources["all"].depth) == 3


# ------------------------------------------------------------------------------------ (c) refusal
@pytest.mark.parametrize("selector", ["messageType = ", "quadTree LIKE 5", "(a = 1"])
def test_rhea_invalid_selector_refused_with_invalid_field(node_binary: str, broker: BrokerUnderTest,
                                                          selector: str) -> None:
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-2", mode="consume", address="all",
                                                   selector=selector, count=1))
    assert code == 2 and not of(events, "message"), events
    [error] = of(events, "link_error")
    assert error["condition"] == "amqp:invalid-field"
    assert "position" in error["description"]
    assert of(events, "attached")[0]["source"] is None  # refused: the attach answer has no source


# ------------------------------------------------------------------------------------ (d) rejection
@pytest.mark.parametrize("bad, reason", [
    ({"publisherId": None}, "publisherId"),
    ({"messageType": typed("symbol", "DENM")}, "messageType"),  # a symbol is not a string (table 1)
    ({"causeCode": typed("string", "1")}, "causeCode"),
])
def test_rhea_invalid_message_rejected_then_valid_accepted(node_binary: str, broker: BrokerUnderTest,
                                                           bad: dict[str, Any], reason: str) -> None:
    properties = {k: v for k, v in {**denm_properties(), **bad}.items() if v is not None}
    consumer = broker.connect("actor-2")
    receiver = consumer.create_receiver("all", credit=10)
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-1", mode="publish", address="in", messages=[
        {"application_properties": properties, "body_hex": b"bad".hex()},
        {"application_properties": denm_properties(), "body_hex": b"good".hex()}]))
    assert code == 0, events
    rejected, accepted = sorted(of(events, "outcome"), key=lambda e: e["index"])
    assert rejected["outcome"] == "rejected" and accepted["outcome"] == "accepted", events
    assert rejected["error"]["condition"] == "amqp:invalid-field"
    assert reason in rejected["error"]["description"]
    assert bytes(receiver.receive(timeout=5).body) == b"good"
    receiver.accept()
    with pytest.raises(Timeout):
        receiver.receive(timeout=0.3)
    consumer.close()


# ------------------------------------------------------------------------------------ (e) TLS / SASL
@pytest.mark.parametrize("sasl", ["EXTERNAL", "ANONYMOUS", "none"])
def test_rhea_sasl_variants_identity_is_certificate_cn(node_binary: str, broker: BrokerUnderTest, sasl: str) -> None:
    # actor-1 may publish on "in": accepted whatever SASL said, because the identity is the CN.
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-1", sasl=sasl, mode="publish", address="in",
                                                   messages=[{"application_properties": denm_properties()}]))
    assert code == 0 and of(events, "outcome") == [{"event": "outcome", "index": 0, "outcome": "accepted"}], events
    # actor-3 may not: the CN, not a SASL user name, decides.
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-3", sasl=sasl, mode="publish", address="in",
                                                   messages=[{"application_properties": denm_properties()}]))
    assert code == 2 and of(events, "link_error")[0]["condition"] == "amqp:unauthorized-access", events
    assert of(events, "attached") == [{"event": "attached", "target": None}]  # refused: null target (2.6.3)


def test_rhea_presettled_publishing_and_oversized_message(node_binary: str, broker: BrokerUnderTest) -> None:
    # at-most-once (settled on send, no outcomes): the messages still arrive
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-1", mode="publish", address="in", presettled=True,
                                                   messages=[{"application_properties": denm_properties(),
                                                              "body_hex": f"0{i}"} for i in range(3)]))
    assert code == 0 and len(of(events, "sent")) == 3 and not of(events, "outcome"), events
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-2", mode="consume", address="all", count=3))
    assert code == 0 and [m["body_hex"] for m in of(events, "message")] == ["00", "01", "02"], events
    # larger than the broker's max-message-size (1 MiB, announced in its attach): the link is closed
    code, events = run_rhea(node_binary, rhea_spec(broker, "actor-1", mode="publish", address="in", messages=[
        {"application_properties": denm_properties(), "body_hex": "00" * (1024 * 1024 + 1)}]))
    assert code == 2 and of(events, "link_error") == [{"event": "link_error", "condition": "amqp:link:message-size-exceeded",
                                                       "description": "message larger than 1048576 bytes"}], events


@pytest.mark.parametrize("cn, fields, alert", [
    (None, {"sasl": "ANONYMOUS"}, "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED"),  # no client certificate
    ("actor-1", {"tls_max": "TLSv1.2"}, "ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION"),  # valid certificate, TLS 1.2 at most
])
def test_rhea_refused_without_certificate_or_with_tls12(node_binary: str, broker: BrokerUnderTest,
                                                        cn: str | None, fields: dict[str, Any], alert: str) -> None:
    code, events = run_rhea(node_binary, rhea_spec(broker, cn, mode="publish", address="in",
                                                   messages=[{"application_properties": denm_properties()}],
                                                   **fields))
    assert code == 2 and not of(events, "connection_open") and not of(events, "outcome"), events
    assert len(of(events, "disconnected")) == 1, events
    assert of(events, "disconnected")[0]["code"] == alert, events  # the broker's TLS alert reached rhea
    # The broker never got as far as an AMQP connection for it.
    records = complete_records(broker.log_path)
    assert not [r for r in records if r["event"] in ("connect", "connection_open")], records
