"""check_closed (interchange.testing.stalled_clients): each stalled connection's result against the node's
records: closed by its stage's deadline (+ slack, not a second or more early), the stage's record for its
port, an answer from the node or none as the stage gets. Each way of failing is found, and only that one."""
from __future__ import annotations

from interchange.testing.stalled_clients import EXPECTED, check_closed


def result(interface: str, mode: str, held: float | None, port: int = 40000, received: int | None = None) -> dict:
    answered = EXPECTED[(interface, mode)][3]
    return {"interface": interface, "mode": mode, "stalled": None if held is None else 100.0,
            "closed": 100.0 + (held or 0.0), "error": None, "port": port,
            "received": (45 if answered else 0) if received is None else received}


def record(port: int, interface: str, mode: str) -> dict:
    _, event, stage, _ = EXPECTED[(interface, mode)]
    key = "reason" if event == "tls_refused" else "stage"
    return {"event": event, "details": {"peer": f"127.0.0.1:{port}", key: stage}}


def test_every_stall_closed_by_its_deadline_passes() -> None:
    results = [result(i, m, EXPECTED[(i, m)][0] + 0.3, port=40000 + n) for n, (i, m) in enumerate(EXPECTED)]
    records = [record(40000 + n, i, m) for n, (i, m) in enumerate(EXPECTED)]
    records.append({"event": "connect", "details": {"peer": "127.0.0.1:40003", "identity": "actor-1"}})
    assert check_closed(results, records) == []


def test_late_early_and_never_stalled_are_found() -> None:
    late = result("bi", "open-missing", 4.5 + 2.1, port=1)
    early = result("ii", "body-trickle", 3.5 - 1.2, port=2)
    never = result("bi", "sasl-header", None, port=3)
    problems = check_closed([late, early, never], [record(1, "bi", "open-missing"), record(2, "ii", "body-trickle"),
                                                   record(3, "bi", "sasl-header")])
    assert len(problems) == 3
    assert "held 6.60 s" in problems[0] and "held 2.30 s" in problems[1] and "did not reach" in problems[2]


def test_the_wrong_stage_or_no_record_for_the_port_is_found() -> None:
    # a sasl-header stall the node closed as if nothing came after TLS (a client that sent nothing)
    wrong = result("bi", "sasl-header", 3.6, port=5)
    missing = result("ii", "tls-idle", 4.1, port=6)
    problems = check_closed([wrong, missing], [record(5, "bi", "tls-idle"), record(7, "ii", "tls-idle")])
    assert len(problems) == 2
    assert "no preamble_timeout 'SASL exchange (sasl-init)' record" in problems[0]
    assert "port 6: no request_timeout 'request headers' record, but []" in problems[1]


def test_an_answer_where_none_comes_and_none_where_one_does_are_found() -> None:
    silent = result("ii", "header-trickle", 4.2, port=8, received=0)  # no 408: no request was begun
    answered = result("bi", "tls-idle", 4.2, port=9, received=12)
    problems = check_closed([silent, answered], [record(8, "ii", "header-trickle"), record(9, "bi", "tls-idle")])
    assert len(problems) == 2
    assert "0 bytes from the node, an answer expected" in problems[0]
    assert "12 bytes from the node, none expected" in problems[1]


def test_without_records_the_closes_are_checked_and_the_log_is_not() -> None:
    # a node logging errors only writes no stage records: the deadlines still count, the records do not
    on_time = result("bi", "tls-idle", EXPECTED[("bi", "tls-idle")][0] + 0.3, port=10)
    late = result("bi", "open-missing", 4.5 + 2.1, port=11)
    problems = check_closed([on_time, late], None)
    assert len(problems) == 1 and "held 6.60 s" in problems[0]
    assert len(check_closed([on_time], [])) == 1  # (an empty log is checked: the record is missing)
