"""What a node exports for the alert rules and the dashboard (deploy/monitoring/): a live node's
/metrics after traffic, a refused handshake and a full source, read with prometheus-client's own
parser and compared with what the node's files and clients say; the certificate cache; the
scrape targets of a multi-process node (``interchange monitoring-targets``)."""
from __future__ import annotations

import contextlib
import io
import json
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from certs import TestPki
from interchange.app.admin import start_admin
from interchange.app.cli import main
from interchange.app.node import node_registry
from interchange.app.node_metrics import ParsedFiles, scrape_targets
from interchange.testing.broker_harness import start_broker
from interchange.testing.harness import BROKER_CN, denm
from test_broker_bi import SOURCES, TARGETS
from interchange.testing.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "deploy" / "node.example.toml"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def refused_handshake(pki: TestPki, port: int) -> None:
    """A client without a certificate: the broker refuses the handshake (tls_refused)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(pki.trust_bundle)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with contextlib.suppress(ssl.SSLError, ConnectionError, OSError):
            with context.wrap_socket(raw, server_hostname=BROKER_CN) as tls:
                tls.sendall(b"AMQP\x03\x01\x00\x00")
                tls.recv(8)


def test_a_live_node_exports_what_the_rules_read(pki: TestPki, tmp_path: Path) -> None:
    b = start_broker(pki, tmp_path, TARGETS, SOURCES)
    try:
        registry, federation = node_registry(b.node, True)
        runner, port = b.run(start_admin("127.0.0.1", 0, b.node.core, b.node.server, b.node.log, registry,
                                         federation=federation))
        consumer = b.connect("actor-2")  # a peer on the BI while scraped
        publisher = b.connect("actor-1")
        sender = publisher.create_sender("in")
        for n in range(230):  # "small" holds 200: 30 dropped (IP_032)
            sender.send(denm(body=str(n).encode()))
        refused_handshake(pki, b.port)
        deadline = time.monotonic() + 10
        while b.node.log.counts.get(("warning", "tls_refused"), 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = samples(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
        publisher.close()
        consumer.close()
        b.run(runner.cleanup())
    finally:
        b.stop()
    assert value(found, "interchange_messages_received_by_type_total", message_type="DENM", peer="actor-1",
                 origin="local") == 230
    assert value(found, "interchange_source_max_messages", source="small") == 200
    assert value(found, "interchange_source_depth", source="small") == 200
    assert value(found, "interchange_source_dropped_total", source="small") == 30
    assert value(found, "interchange_source_max_bytes", source="all") == 256 * 1024 * 1024  # [broker.memory]
    assert value(found, "interchange_source_expired_total", source="all") == 0
    assert value(found, "interchange_durable_store_writable") == 1
    assert value(found, "interchange_log_records_total", level="warning", event="tls_refused") == 1
    assert value(found, "interchange_log_level_records_total", level="warning") >= 1
    assert value(found, "interchange_log_level_records_total", level="error") == 0
    assert value(found, "interchange_process_info", interchange=BROKER_CN, broker_process="0", processes="1") == 1
    free = value(found, "interchange_data_dir_free_bytes", path=str(tmp_path))
    assert 0 < free <= value(found, "interchange_data_dir_size_bytes", path=str(tmp_path))
    own = x509.load_pem_x509_certificates(pki.identity(BROKER_CN).chain.read_bytes())
    for position, cert in enumerate(own):
        subject = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value
        assert value(found, "interchange_tls_certificate_expiry_timestamp_seconds", subject=str(subject),
                     position=str(position)) == cert.not_valid_after_utc.timestamp()
    for path in pki.crls:
        crl = x509.load_pem_x509_crl(Path(path).read_bytes())
        issuer = crl.issuer.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value
        assert crl.next_update_utc is not None
        assert value(found, "interchange_tls_crl_next_update_timestamp_seconds", issuer=str(issuer),
                     file=Path(path).name) == crl.next_update_utc.timestamp()
    actor_2 = x509.load_pem_x509_certificate(pki.identity("actor-2").chain.read_bytes())
    assert value(found, "interchange_tls_peer_certificate_expiry_timestamp_seconds",
                 peer="actor-2") == actor_2.not_valid_after_utc.timestamp()
    assert not any(name.startswith("interchange_ii_") for name, _ in found)  # this node runs no II


def test_certificate_files_are_parsed_again_only_when_they_change(pki: TestPki, tmp_path: Path) -> None:
    chain = tmp_path / "chain.pem"
    chain.write_bytes(pki.identity("actor-1").chain.read_bytes())
    files = ParsedFiles()
    first = files.chain(chain)
    assert first[0].subject == "actor-1" and files.chain(chain) is first  # unchanged: the cached facts
    chain.write_bytes(pki.identity("actor-2").chain.read_bytes())
    assert files.chain(chain)[0].subject == "actor-2"
    chain.write_bytes(b"not a certificate")
    assert files.chain(chain) == [] and files.chain(tmp_path / "missing.pem") == []


def test_scrape_targets_cover_every_broker_process() -> None:
    assert scrape_targets("a.example.eu", "10.0.0.5", 9090, 3) == [
        {"targets": ["10.0.0.5:9090"], "labels": {"node": "a.example.eu", "process": "0"}},
        {"targets": ["10.0.0.5:9091"], "labels": {"node": "a.example.eu", "process": "1"}},
        {"targets": ["10.0.0.5:9092"], "labels": {"node": "a.example.eu", "process": "2"}}]
    assert scrape_targets("a", "::1", 9090, 1)[0]["targets"] == ["[::1]:9090"]


def test_monitoring_targets_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "node.toml"
    config.write_text(EXAMPLE.read_text().replace("processes = 1 ", "processes = 2 "))
    assert main(["monitoring-targets", "--config", str(config), "--host", "a.example.eu"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [entry["targets"] for entry in printed] == [["a.example.eu:9090"], ["a.example.eu:9091"]]
    config.write_text(EXAMPLE.read_text().replace("port = 9090", "port = 0"))
    with contextlib.redirect_stderr(io.StringIO()) as error:
        assert main(["monitoring-targets", "--config", str(config)]) == 2
    assert "admin.port" in error.getvalue()
