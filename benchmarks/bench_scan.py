"""Micro-benchmark: routing scan (IP_008) vs proton's full Message.decode, in µs per message.

Also times validate_application_properties (tables 1-7) on the scanned DENM properties, and the
broker's whole admission (scan, decode, validate, expiry, BrokerMessage) of DENMs whose application
properties all differ (no cache hit) and of one repeated DENM, with the C accelerator
(interchange.broker._admit) and with the pure-Python path.

Messages: a DENM carrying the twelve application properties of the appendix F logging example
(plus publicationId and baselineVersion) with a ~200 B body, and the same DENM with a 500 KB body
(the IP_012/013 payload bound). Bodies are data sections, as IP_118 asks.

    .venv/bin/python benchmarks/bench_scan.py [--number N] [--repeat R]
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import timeit
from collections.abc import Callable

import proton
from proton import Message, int32

from interchange.broker.admission import Admission
from interchange.broker.amqp_scan import scan_message
from interchange.broker.ttl_policy import TtlPolicy
from interchange.broker.validation import validate_application_properties

#: the C accelerator's admit (typed in _admit.pyi), or None when it is not built
c_admit: Callable[..., object] | None
try:
    from interchange.broker._admit import admit as c_admit
except ImportError:
    c_admit = None

QUADTREE = (
    ",120212302013111223,1202123020110,1202123020111,1202123021000,1202123021001,1202123021010,"
    "1202123020112,1202123020113,1202123021002,1202123021003,1202123021012,1202123020130,"
    "1202123020131,1202123021020,1202123021021,1202123021030,1202123020132,1202123020133,"
    "1202123021022,1202123021023,1202123021032,1202123020310,1202123020311,1202123021200,"
    "1202123021201,1202123021210,"
)
DENM_PROPERTIES = {
    "latitude": 50.2268645,
    "longitude": 14.4041937,
    "messageType": "DENM",
    "protocolVersion": "DENM:1.3.1",
    "causeCode": int32(1),
    "subCauseCode": int32(4),
    "serviceType": ",HLN-TJA,",
    "quadTree": QUADTREE,
    "originatingCountry": "CZ",
    "publisherId": "CZ00003",
    "publicationId": "CZ00003:DENM-TJA-0001",
    "baselineVersion": "1.8.0",
}


def encode(body_size: int) -> bytes:
    body = os.urandom(body_size)
    return Message(body=body, inferred=True, properties=DENM_PROPERTIES, durable=True, ttl=648).encode()


def encode_distinct(count: int) -> list[bytes]:
    """``count`` DENMs (200 B bodies) whose application properties all differ (latitude, publicationId)."""
    out = []
    for i in range(count):
        properties = {**DENM_PROPERTIES, "latitude": 50.0 + i * 1e-6, "publicationId": f"CZ00003:DENM-TJA-{i:06d}"}
        out.append(Message(body=os.urandom(200), inferred=True, properties=properties, durable=True).encode())
    return out


def proton_decode(data: bytes) -> Message:
    message = Message()
    message.decode(data)
    return message


def per_message_us(function: Callable[[], object], number: int, repeat: int) -> tuple[float, float]:
    """(best, median) µs per call over ``repeat`` rounds of ``number`` calls."""
    rounds = sorted(timeit.repeat(function, number=number, repeat=repeat))
    return rounds[0] / number * 1e6, rounds[len(rounds) // 2] / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per round for the DENM (500 KB: /10)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds; best and median are reported")
    args = parser.parse_args()

    print(f"Python {platform.python_version()}, python-qpid-proton {'.'.join(map(str, proton.VERSION))}, {platform.machine()}")
    print(f"{'message':<26}{'bytes':>9}  {'scan_message µs':>18}  {'Message.decode µs':>18}  {'ratio':>6}")
    for label, body_size, number in (
        ("DENM, 12 props, 200 B", 200, args.number),
        ("DENM, 12 props, 500 KB", 500_000, max(1, args.number // 10)),
    ):
        data = encode(body_size)
        scanned = scan_message(data)
        assert scanned.application_properties["messageType"] == "DENM"
        assert len(scanned.application_properties) == 12
        scan_best, scan_median = per_message_us(lambda: scan_message(data), number, args.repeat)  # noqa: B023 (called within this turn of the loop)
        decode_best, decode_median = per_message_us(lambda: proton_decode(data), number, args.repeat)  # noqa: B023 (called within this turn of the loop)
        print(
            f"{label:<26}{len(data):>9}  {scan_best:>8.2f} ({scan_median:>6.2f})  "
            f"{decode_best:>8.2f} ({decode_median:>6.2f})  {decode_best / scan_best:>5.1f}x"
        )
    scanned = scan_message(encode(200))
    props, types = scanned.application_properties, scanned.application_property_types
    assert validate_application_properties(props, types) == []
    best, median = per_message_us(lambda: validate_application_properties(props, types), args.number, args.repeat)
    print(f"{'validate (tables 1-7), DENM':<35}  {best:>8.2f} ({median:>6.2f})")

    # whole admission; the pool is larger than the Python path's cache (4096), so every
    # distinct message misses it
    print(f"{'admission, DENM 200 B':<35}  {'C accelerator µs':>18}  {'pure Python µs':>18}  {'ratio':>6}")
    pool = encode_distinct(5_000)
    repeated = pool[0]
    policy = TtlPolicy()
    for label, sample in (("distinct properties", None), ("repeated properties", repeated)):
        figures: list[tuple[float, float] | None] = []
        for accelerated in (True, False):
            if accelerated and c_admit is None:
                figures.append(None)
                continue
            admit = Admission(policy, accelerated=accelerated).admit
            if sample is None:
                messages = itertools.cycle(pool)
                run = lambda admit=admit, messages=messages: admit(next(messages), "p", False, None, 0)  # noqa: E731
            else:
                run = lambda admit=admit, sample=sample: admit(sample, "p", False, None, 0)  # noqa: E731
            run()
            figures.append(per_message_us(run, args.number, args.repeat))
        c, py = figures
        assert py is not None  # the pure Python path always runs
        c_text = f"{c[0]:>8.2f} ({c[1]:>6.2f})" if c else f"{'not built':>17}"
        ratio = f"{py[0] / c[0]:>5.1f}x" if c else ""
        print(f"  {label:<33}  {c_text}  {py[0]:>8.2f} ({py[1]:>6.2f})  {ratio}")
    if c_admit is not None:
        best, median = per_message_us(lambda: c_admit(repeated, None), args.number, args.repeat)
        print(f"  {'_admit.admit() alone':<33}  {best:>8.2f} ({median:>6.2f})")
    print("figures: best (median) of the rounds")


if __name__ == "__main__":
    main()
