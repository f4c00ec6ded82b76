"""The controllers the TLEX simulator plays itself (interchange.bridges.tlex.controllers.VirtualControllers)
on an event loop with a clock of its own (:class:`VirtualClockLoop`): the schedule the docs promise
(docs/tlex-bridge.md, "Fake controllers": MAPEM before the first SPATEM, then a SPATEM per period on
the controller's own phase; an SREM answered with an SSEM per intersection of its controller) is
checked exactly, whatever the host's speed; and a host too slow for the schedule still gets its loop
back between the batches of late payloads (the sessions are served, the simulator stops)."""
from __future__ import annotations

import asyncio
import contextlib
import math
import selectors
from typing import Any

from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.controllers import ControllerSpec, VirtualControllers, controller_phase
from interchange.bridges.tlex.payloads import MESSAGE_IDS, kind_of
from interchange.bridges.tlex.sim_cli import tlc_id

PERIOD = 0.1  # 10 Hz


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """Time moves only where the loop would wait, by the wait (or where a test moves :attr:`now`): a
    timer runs at the time it was due, never late, however busy the host is. I/O is polled, not waited
    for (the loop's own wake-up pipe is its only file)."""

    def __init__(self, start: float = 1000.0) -> None:
        super().__init__(selectors.DefaultSelector())
        self.now = start
        poll = self._selector.select  # type: ignore[attr-defined]

        def select(timeout: float | None = None) -> list[Any]:
            events = poll(0)
            if not events:
                if timeout is None:
                    raise RuntimeError("nothing scheduled: the loop would wait forever")
                self.now += timeout
            return events

        self._selector.select = select  # type: ignore[attr-defined]

    def time(self) -> float:
        return self.now


def run(main: Any) -> Any:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()


def specs(count: int) -> list[ControllerSpec]:
    return [ControllerSpec(tlc_id(i), [f"5-{2 * i}", f"5-{2 * i + 1}"], i) for i in range(count)]


def test_virtual_controllers_send_mapem_first_then_spatem_on_their_phases() -> None:
    played = VirtualControllers(specs(300), spatem_hz=10, mapem_interval=60)
    sent: list[tuple[float, Payload]] = []

    async def main(loop: VirtualClockLoop) -> tuple[float, float]:
        start = loop.time()
        played.start(lambda payload: sent.append((loop.time(), payload)))
        await asyncio.sleep(1.05)
        end = loop.time()
        await played.stop()
        return start, end

    start, end = run(main)
    by_tlc: dict[str | None, list[tuple[float, str]]] = {}
    for at, payload in sent:
        by_tlc.setdefault(payload.tlc, []).append((at, kind_of(payload.payload_type)))
    assert set(by_tlc) == set(played.specs)
    for tlc, seen in by_tlc.items():
        kinds = [kind for _, kind in seen]
        assert kinds[:2] == ["MAPEM", "MAPEM"] and kinds.count("MAPEM") == 2, tlc
        phase = controller_phase(str(tlc), PERIOD)
        ticks = [k * PERIOD + phase for k in range(math.floor(start / PERIOD), math.ceil(end / PERIOD) + 1)]
        due = [t for t in ticks if start < t <= end]  # 10 or 11 in 1.05 s
        spatems = [at for at, kind in seen if kind == "SPATEM"]
        on_time = [t for t in due for _ in range(2)]  # (two intersections)
        assert len(spatems) == len(on_time) and max(map(abs, map(float.__sub__, spatems, on_time))) < 1e-9, tlc
    # the phases (the schedule) fill every 10 ms slot of the period evenly: not one burst
    planned = [sum(int(controller_phase(tlc, PERIOD) * 100) == slot for tlc in played.specs) for slot in range(10)]
    assert min(planned) > 0.3 * max(planned)
    count = len(sent)
    played.received(Payload(MESSAGE_IDS["SREM"], 1, b"srem", tlc_id(7)))
    assert [(p.tlc, kind_of(p.payload_type)) for _, p in sent[count:]] == [(tlc_id(7), "SSEM")] * 2
    assert list(played.from_broker) == [tlc_id(7)]


def test_a_host_too_slow_for_the_schedule_still_gets_its_loop_between_late_batches() -> None:
    """Each payload costs 1 ms (the clock moves in the send): 600 payloads per 100 ms period can never
    catch up. The late ones are sent together, in order, but the loop runs in between: the test's own
    timer fires and the simulator stops."""
    played = VirtualControllers(specs(300), spatem_hz=10, mapem_interval=60)
    sent: list[tuple[float, Payload]] = []
    others: list[float] = []

    async def other(loop: VirtualClockLoop) -> None:  # a session being served
        while True:
            others.append(loop.time())
            await asyncio.sleep(0.01)

    async def main(loop: VirtualClockLoop) -> None:
        def slow_send(payload: Payload) -> None:
            sent.append((loop.time(), payload))
            loop.now += 0.001
            assert loop.now < 1030.0, "the controllers' task has held the loop for 30 s"

        served = asyncio.create_task(other(loop))
        played.start(slow_send)
        await asyncio.sleep(1.05)
        await played.stop()
        served.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await served

    run(main)
    assert sent and len(sent) < 300 * 2 * 11  # behind the schedule: fewer than on time
    gaps = [b - a for a, b in zip(others, others[1:])]
    assert max(gaps) <= 300 * 4 * 0.001 + 0.011  # a batch: at most one period's payloads (MAPEMs, SPATEMs)
    first: dict[str | None, list[str]] = {}
    for _, payload in sent:
        first.setdefault(payload.tlc, []).append(kind_of(payload.payload_type))
    assert all(kinds[:2] == ["MAPEM", "MAPEM"] and set(kinds[2:]) <= {"SPATEM"} for kinds in first.values())
