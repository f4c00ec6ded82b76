"""The II against its own OpenAPI document: schemathesis generates requests for every
operation from the document the running II serves, sends them over mutual TLS to a real node
process, and checks each answer: no 5xx, a documented status, JSON where JSON is documented, and
a body valid under the documented schema. A bounded number of examples per operation keeps it fast.

Requests go as actor-a (its path name filled in for the actor endpoints) and as neighbour B (for
the II endpoints), each with its test-PKI client certificate.
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from requests.adapters import HTTPAdapter
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from certs import TestPki
from certs.tls import TlsFiles, client_context
from ii_api.peers.discovery import Neighbour
from interchange.testing.harness import A, B
from interchange.testing.ii_harness import DOMAIN, node_config, seed_neighbours
from interchange.testing.paths import REPO_ROOT

ACTOR = "actor-a"
EXAMPLES = 8  #: per operation
II_OPERATIONS = {"post_capabilities", "post_subscriptions"}  #: sent as neighbour B


class _MutualTls(HTTPAdapter):
    """requests over the node's TLS: TLS 1.3 with a client certificate, the node's name checked
    though the URL says 127.0.0.1."""

    def __init__(self, pki: TestPki, cn: str) -> None:
        self._context = client_context(TlsFiles.from_pki(pki.directory, cn, with_crls=False))
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs.update(ssl_context=self._context, assert_hostname=A, server_hostname=A)
        super().init_poolmanager(*args, **kwargs)


def _session(pki: TestPki, cn: str) -> requests.Session:
    session = requests.Session()
    session.mount("https://", _MutualTls(pki, cn))
    return session


class RunningII:
    def __init__(self, pki: TestPki, port: int) -> None:
        self.base = f"https://127.0.0.1:{port}"
        self.sessions = {cn: _session(pki, cn) for cn in (ACTOR, B)}


@pytest.fixture(scope="module")
def running_ii(pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningII]:
    workdir = tmp_path_factory.mktemp("openapi-fuzz")
    seed_neighbours(workdir / "a", [Neighbour(B, "127.0.0.1", 9, DOMAIN)])
    config = workdir / "node.json"
    config.write_text(node_config(pki, A, workdir / "a").model_dump_json(), encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "interchange", "broker", "--config", str(config)],
                               stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "II (HTTPS) port" in line, line
        yield RunningII(pki, int(line.rsplit("II (HTTPS) port ", 1)[1]))
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def ii_schema(running_ii: RunningII) -> Any:
    """The document as the running II serves it."""
    answer = running_ii.sessions[ACTOR].get(f"{running_ii.base}/openapi.json", timeout=20)
    assert answer.status_code == 200
    return schemathesis.openapi.from_dict(answer.json())


def _check_operation(operation: Any, running_ii: RunningII) -> None:
    """Up to EXAMPLES generated requests of one operation, each answer checked."""
    as_neighbour = operation.definition.raw.get("operationId") in II_OPERATIONS
    session = running_ii.sessions[B if as_neighbour else ACTOR]

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def send(case: Any) -> None:
        if "name" in (case.path_parameters or {}):
            case.path_parameters["name"] = ACTOR  # the certificate's name: past the 403, into the bodies
        case.call_and_validate(base_url=running_ii.base, session=session, timeout=20,
                               checks=[not_a_server_error, status_code_conformance, content_type_conformance,
                                       response_schema_conformance])

    send()


def test_ii_answers_as_documented(running_ii: RunningII, ii_schema: Any) -> None:
    """Every operation of the document (schemathesis' pytest plugin does not run on pytest 9: the
    operations are driven with their hypothesis strategies here)."""
    failures = []
    operations = [result.ok() for result in ii_schema.get_all_operations()]
    assert len(operations) >= 16
    for operation in operations:
        try:
            _check_operation(operation, running_ii)
        except Exception as exc:
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_document_is_exact(running_ii: RunningII) -> None:
    """No ambiguous oneOf: the application variants exclude each other, the quadTree pattern is stated."""
    document = running_ii.sessions[ACTOR].get(f"{running_ii.base}/openapi.json", timeout=20).json()
    schemas = document["components"]["schemas"]
    assert schemas["DenmApplication"]["required"][0] == "messageType"
    assert "DENM" in schemas["OtherApplication"]["properties"]["messageType"]["not"]["enum"]
    assert schemas["DenmApplication"]["properties"]["quadTree"]["items"]["pattern"] == "^[0-3]{1,30}$"
    listed = document["paths"]["/{name}/subscriptions"]["get"]["responses"]["200"]["content"]["application/json"]
    assert "anyOf" in listed["schema"] and "oneOf" not in listed["schema"]
