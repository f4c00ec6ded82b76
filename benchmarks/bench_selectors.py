"""JMS selector evaluation speed (IP_066/067): compiled selectors vs the reference tree walker.

Evaluates the C-Roads example selectors against a realistic application-property set (the
logged DENM of appendix F, 12 properties, a quadTree of 26 tiles) on one core and prints
evaluations per second for ``Selector.matches`` and for ``jms_selectors.reference.evaluate``
on the same tree, and their ratio. Not a test: nothing is asserted.

    .venv/bin/python benchmarks/bench_selectors.py [--json] [--seconds 0.4]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import timeit
from pathlib import Path

import jms_selectors
from jms_selectors import reference

QUADTREE = (
    ",120212302013111223,1202123020110,1202123020111,1202123021000,1202123021001,1202123021010,"
    "1202123020112,1202123020113,1202123021002,1202123021003,1202123021012,1202123020130,1202123020131,"
    "1202123021020,1202123021021,1202123021030,1202123020132,1202123020133,1202123021022,1202123021023,"
    "1202123021032,1202123020310,1202123020311,1202123021200,1202123021201,1202123021210,"
)
PROPERTIES = {  # appendix F (section 11.4) plus two optional Table 1 fields: 12 properties
    "latitude": 50.2268645, "longitude": 14.4041937, "messageType": "DENM", "protocolVersion": "DENM:1.3.1",
    "causeCode": 1, "subCauseCode": 4, "serviceType": ",HLN-TJA,", "quadTree": QUADTREE,
    "originatingCountry": "CZ", "publisherId": "CZ00003", "publicationId": "CZ00003:DENM-7",
    "baselineVersion": "1.8.0",
}
AREA = [f"120212302{i:04b}".replace("1", "3") for i in range(16)] + [f"1202123021{d}" for d in "0123"]
SELECTORS = {
    "type+tile (target)": "messageType = 'DENM' AND quadTree LIKE '%,1202021%'",
    "type+tile, tile present": "messageType = 'DENM' AND quadTree LIKE '%,1202123021%'",
    "IP_066 quadTree example": (
        "quadTree LIKE '%,031333110%' OR quadTree LIKE '%,031333111%' OR quadTree LIKE '%,031333112%'"
    ),
    "IP_066 type+country": "messageType = 'DENM' AND originatingCountry = 'FR'",
    "20-tile area": " OR ".join(f"quadTree LIKE '%,{tile}%'" for tile in AREA),
    "richer subscription": (
        "messageType = 'DENM' AND originatingCountry IN ('CZ', 'SK', 'AT') "
        "AND (causeCode = 1 OR causeCode = 2 OR causeCode = 99) "
        "AND NOT subCauseCode = 0 AND quadTree LIKE '%,1202123020%' AND \"custom-nw-foo\" IS NULL"
    ),
}


def rate(stmt: str, namespace: dict, seconds: float) -> float:
    """Best evaluations per second over 5 runs of about ``seconds`` each."""
    timer = timeit.Timer(stmt, globals=namespace)
    number, elapsed = timer.autorange()
    number = max(1, int(number * seconds / elapsed))
    return number / min(timer.repeat(repeat=5, number=number))


def machine() -> dict[str, object]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
    }


def run(seconds: float) -> list[dict[str, object]]:
    results: list[dict[str, object]] = []
    for name, text in SELECTORS.items():
        start = time.perf_counter()
        selector = jms_selectors.compile(text)
        compile_us = (time.perf_counter() - start) * 1e6
        compiled = rate("f(p)", {"f": selector.matches, "p": PROPERTIES}, seconds)
        walked = rate("f(t, p)", {"f": reference.evaluate, "t": selector.ast, "p": PROPERTIES}, seconds)
        results.append({
            "name": name, "selector": text if len(text) < 120 else text[:117] + "...",
            "result": selector.evaluate(PROPERTIES), "compile_us": round(compile_us),
            "compiled_per_s": round(compiled), "reference_per_s": round(walked), "ratio": round(compiled / walked, 2),
        })
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--seconds", type=float, default=0.4, help="approximate length of one timing run")
    args = parser.parse_args()
    results = run(args.seconds)
    if args.json:
        print(json.dumps({"machine": machine(), "properties": len(PROPERTIES), "results": results}, indent=2))
        return
    info = machine()
    print(f"Python {info['python']} on {info['cpu']} ({info['cores']} cores), one core used")
    print(f"{'selector':26} {'result':>6} {'compiled/s':>12} {'reference/s':>12} {'ratio':>6} {'compile':>9}")
    for r in results:
        print(f"{r['name']:26} {r['result']!s:>6} {r['compiled_per_s']:>12,} {r['reference_per_s']:>12,} "
              f"{r['ratio']:>5.1f}x {r['compile_us']:>7,}us")


if __name__ == "__main__":
    main()
