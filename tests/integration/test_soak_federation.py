"""The federation soak, short: the scenario of interop_kit/soak.py for ~20 s of publishing
(three real nodes, real DNS, the test PKI, durable messages across one federation hop), with a
consumer paused and the consuming interchange SIGKILLed and restarted midway. Nothing accepted
and still within its TTL may be lost: the paused consumer's messages come back from interchange 3's
store, and what was in transfer from interchange 1 is settled there only once 3 stored it."""
from __future__ import annotations

import json
import random
from pathlib import Path

from interop_kit.soak import SoakPlan, run_soak


def test_no_durable_message_is_lost_across_a_sigkill_and_a_consumer_pause(tmp_path: Path) -> None:
    prefix = f"127.{random.randint(20, 250)}.{random.randint(1, 250)}"  # not shared with a parallel run
    plan = SoakPlan(duration_s=20.0, rate=60.0, drain_s=30.0, prefix=prefix)
    result = run_soak(tmp_path, plan)
    assert any(text.startswith("kill -9") for _, text in result.events), result.events
    for report in result.subscriptions:
        assert report.accepted == report.published > 0, report
        assert (report.lost, report.expired, report.unexpected) == (0, 0, 0), report
        assert report.delivered == report.accepted, report
    # the paused consumer's messages were held by the killed interchange: they came back from its store
    killed = tmp_path / "ixc-3.federation.test" / "node.log"
    recovered = [r for r in map(json.loads, killed.read_text().splitlines()) if r["event"] == "store_recovered"]
    assert recovered and recovered[-1]["details"]["messages"] > 0, recovered
