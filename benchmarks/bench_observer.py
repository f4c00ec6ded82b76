"""What counting accepted messages per (messageType, peer) costs the broker's hot path: one call of
``BrokerObserver.received`` as it is, against the same method without that counter (the peer,
defined here, measured in the same run and process). Best of 7 x 1,000,000 calls, alternating.

    .venv/bin/python benchmarks/bench_observer.py [--number 1000000]
"""
from __future__ import annotations

import argparse
import os
import timeit

from interchange.broker.message import BrokerMessage
from interchange.broker.observer import BrokerObserver


class WithoutPerTypeCounter(BrokerObserver):
    def received(self, message: BrokerMessage, address: str) -> None:
        self.received_count += 1
        log = self.log
        if log is not None and log.messages_on:
            log.message("received_message", message, address)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=1_000_000, help="calls per timing (best of 7)")
    args = parser.parse_args(argv)
    message = BrokerMessage(b"x" * 200, {"messageType": "DENM", "publicationId": "NO00001:denm-1"}, None, False,
                            "actor-1", 0)
    observers = {"current": BrokerObserver(None), "without the per-type counter": WithoutPerTypeCounter(None)}
    for _ in range(3):
        row = []
        for name, observer in observers.items():
            best = min(timeit.repeat("observer.received(message, 't')", number=args.number, repeat=7,
                                     globals={"observer": observer, "message": message}))
            row.append(f"{name} {best * 1e9 / args.number:.0f} ns")
        print("; ".join(row))
    print("load average", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
