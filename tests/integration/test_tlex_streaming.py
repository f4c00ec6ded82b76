"""TCPStreaming over real TLS 1.2 sockets against the simulator: routing between fake controllers
and a Broker session, monitors, single-use tokens, listener expiry, keep-alive, limits, framing
errors, Bye and Reconnect with the supervisor creating new sessions."""
from __future__ import annotations

import asyncio
import ssl

from certs import TestPki
from interchange.bridges.tlex.codec import (
    MONITOR_PAYLOAD,
    Bye,
    Payload,
    StreamDecoder,
    StreamError,
    Token,
    decode_monitor_payload,
    encode,
)
from interchange.bridges.tlex.controllers import ControllerSpec, FakeController
from interchange.bridges.tlex.models import Session
from interchange.bridges.tlex.payloads import MESSAGE_IDS, kind_of, stand_in
from interchange.bridges.tlex.rest import session_request
from interchange.bridges.tlex.session import CloseCause
from interchange.bridges.tlex.stream import Backoff, SessionSupervisor, read_now
from interchange.testing.tlex_harness import DOMAIN, SIM_HOST, TLCS, Sim, eventually, start_virtual_sim, up


async def raw_connect(sim: Sim, session: Session) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    listener = session.details.listener
    return await asyncio.open_connection(listener.host, listener.port, ssl=sim.stream_ssl(), server_hostname=SIM_HOST)


async def read_all(reader: asyncio.StreamReader, timeout: float = 5.0, decoder: StreamDecoder | None = None) -> list:
    """Every datagram the service sends until it closes the connection."""
    decoder, out = decoder or StreamDecoder(), []
    async with asyncio.timeout(timeout):
        while data := await reader.read(65536):
            try:
                out.extend(decoder.feed(data))
            except StreamError:
                break
    return out


async def new_session(sim: Sim, mode: str = "broker", tlcs: tuple[str, ...] = TLCS) -> Session:
    account = {"broker": sim.broker, "monitor": sim.monitor}.get(mode, sim.tlc_system)
    async with sim.api(account) as api:
        return await api.create_session(session_request(DOMAIN, mode, list(tlcs)))


async def test_controllers_and_broker_exchange_payloads(sim: Sim) -> None:
    received: list[Payload] = []
    async with sim.api(sim.broker) as broker_api, sim.api(sim.tlc_system) as tlc_api:
        bridge = SessionSupervisor(broker_api, session_request(DOMAIN, "broker", list(TLCS[:2])),
                                   stream_ssl=sim.stream_ssl(), on_payload=received.append, server_hostname=SIM_HOST)
        controllers = [FakeController(ControllerSpec(tlc, [f"5-{57 + i}"], 1000 + i), tlc_api, domain=DOMAIN,
                                      stream_ssl=sim.stream_ssl(), spatem_hz=20, server_hostname=SIM_HOST)
                       for i, tlc in enumerate(TLCS[:2])]
        bridge_task = asyncio.create_task(bridge.run())
        await asyncio.wait_for(bridge.connected.wait(), 5)
        for controller in controllers:
            controller.start()
        try:
            await eventually(lambda: {p.tlc for p in received if kind_of(p.payload_type) == "SPATEM"} == set(TLCS[:2]))
            first = {tlc: [kind_of(p.payload_type) for p in received if p.tlc == tlc][0] for tlc in TLCS[:2]}
            assert first == {TLCS[0]: "MAPEM", TLCS[1]: "MAPEM"}  # IP_104 on the controllers' side
            assert received[0].payload[:2] == bytes([2, MESSAGE_IDS["MAPEM"]])
            srem = Payload(MESSAGE_IDS["SREM"], read_now().utc_ms, stand_in("SREM", 1, "5-58", 1), TLCS[1])
            bridge.send(srem)
            await eventually(lambda: any(kind_of(p.payload_type) == "SSEM" for p in received))
            assert controllers[1].record.received == [Payload(srem.payload_type, srem.origin_ms, srem.payload)]
            assert controllers[0].record.received == []  # the SREM reached only its controller
            assert [p.tlc for p in received if kind_of(p.payload_type) == "SSEM"] == [TLCS[1]]
        finally:
            for controller in controllers:
                await controller.stop()
            bridge_task.cancel()


async def test_monitor_receives_wrapped_payloads(sim: Sim) -> None:
    monitor = await new_session(sim, "monitor", TLCS[:1])
    reader, writer = await raw_connect(sim, monitor)
    writer.write(b"\x01" + encode(Token(monitor.token)))
    tlc = await new_session(sim, "singleplex", TLCS[:1])
    tlc_reader, tlc_writer = await raw_connect(sim, tlc)
    tlc_writer.write(b"\x01" + encode(Token(tlc.token)) + encode(Payload(4, 1234, b"spat-bytes")))
    decoder, got = StreamDecoder(), []
    async with asyncio.timeout(5):
        while not any(isinstance(d, Payload) for d in got):
            got.extend(decoder.feed(await reader.read(65536)))
    payload = next(d for d in got if isinstance(d, Payload))
    assert payload.payload_type == MONITOR_PAYLOAD and payload.tlc == TLCS[0]
    wrapped = decode_monitor_payload(payload.payload)
    assert (wrapped.publisher_token, wrapped.published_ms, wrapped.payload_type, wrapped.payload) == (
        tlc.token, 1234, 4, b"spat-bytes")
    writer.write(encode(Payload(4, 1, b"x", TLCS[0])))  # 6.3.3.4: monitors only receive
    assert Bye("monitor sessions can only receive data") in await read_all(reader, decoder=decoder)
    tlc_writer.close()


async def test_token_is_single_use(sim: Sim) -> None:
    session = await new_session(sim)
    reader, writer = await raw_connect(sim, session)
    writer.write(b"\x01" + encode(Token(session.token)))
    await eventually(lambda: session.token in sim.service.connections)
    reader2, writer2 = await raw_connect(sim, session)
    writer2.write(b"\x01" + encode(Token(session.token)))
    assert await read_all(reader2) == [Bye("session token already used")]
    await eventually(lambda: any(c.close.cause is CloseCause.REFUSED for c in sim.service.closes))
    writer.write(encode(Bye("done")))
    await read_all(reader)
    reader3, writer3 = await raw_connect(sim, session)  # the session ended with its connection
    writer3.write(b"\x01" + encode(Token(session.token)))
    assert await read_all(reader3) == [Bye("unknown or expired session token")]


async def test_listener_expires(sim: Sim) -> None:
    session = await new_session(sim)
    await asyncio.sleep(sim.service.registry.limits.listener_expiry + 0.1)
    reader, writer = await raw_connect(sim, session)
    writer.write(b"\x01" + encode(Token(session.token)))
    assert await read_all(reader) in ([Bye("session listener expired")], [Bye("unknown or expired session token")])


async def test_silent_client_hits_keepalive_timeout(sim: Sim) -> None:
    session = await new_session(sim)
    reader, writer = await raw_connect(sim, session)
    writer.write(b"\x01" + encode(Token(session.token)))
    loop = asyncio.get_running_loop()
    start = loop.time()
    datagrams = await read_all(reader)
    assert datagrams[-1] == Bye("keep-alive timeout")
    assert 1.4 <= loop.time() - start < 3.0
    await eventually(lambda: any(c.close.cause is CloseCause.KEEPALIVE for c in sim.service.closes))


async def test_framing_error_closes_connection(sim: Sim) -> None:
    session = await new_session(sim)
    reader, writer = await raw_connect(sim, session)
    writer.write(b"\x01" + encode(Token(session.token)) + b"\xaa\xbc\x00\x01\x00")
    assert Bye("framing") not in await read_all(reader)  # dropped at once, no Bye
    await eventually(lambda: any(c.close.cause is CloseCause.FRAMING for c in sim.service.closes))


async def test_rate_limit_closes_connection(sim: Sim) -> None:
    session = await new_session(sim, "singleplex", TLCS[:1])
    reader, writer = await raw_connect(sim, session)
    flood = b"".join(encode(Payload(4, 1, b"s" * 10)) for _ in range(500))  # 500 in an instant > 200/s over 2 s
    writer.write(b"\x01" + encode(Token(session.token)) + flood)
    assert Bye("payload rate limit exceeded") in await read_all(reader)


async def test_supervisor_reconnects_after_reconnect_bye_and_drop(sim: Sim) -> None:
    events: list[tuple[str, dict]] = []
    async with sim.api(sim.broker) as api:
        supervisor = SessionSupervisor(api, session_request(DOMAIN, "broker", list(TLCS)), stream_ssl=sim.stream_ssl(),
                                       on_payload=lambda p: None, server_hostname=SIM_HOST,
                                       on_event=lambda name, fields: events.append((name, fields)),
                                       backoff=Backoff(0.05, 0.2))
        task = asyncio.create_task(supervisor.run())
        try:
            await eventually(lambda: up(sim, supervisor, 1))
            assert sim.service.reconnect() == 1
            await eventually(lambda: up(sim, supervisor, 2))
            assert sim.service.say_bye("maintenance") == 1
            await eventually(lambda: up(sim, supervisor, 3))
            await asyncio.sleep(2.0)  # longer than the keep-alive timeout: our KeepAlives keep it up
            assert supervisor.stats.sessions == 3 and supervisor.stats.connected
            assert supervisor.stream is not None and supervisor.stream.clock_diff_ms is not None  # timestamps answered
        finally:
            task.cancel()
    causes = [f["cause"] for name, f in events if name == "stream_closed"]
    assert causes == ["reconnect", "bye"]


async def test_outbox_keeps_payloads_while_no_session(sim: Sim) -> None:
    delivered: list[Payload] = []
    async with sim.api(sim.broker) as api, sim.api(sim.tlc_system) as tlc_api:
        supervisor = SessionSupervisor(api, session_request(DOMAIN, "broker", [TLCS[0]]), stream_ssl=sim.stream_ssl(),
                                       on_payload=lambda p: None, server_hostname=SIM_HOST, backoff=Backoff(0.05, 0.2))
        controller = SessionSupervisor(tlc_api, session_request(DOMAIN, "singleplex", [TLCS[0]]),
                                       stream_ssl=sim.stream_ssl(), on_payload=delivered.append,
                                       server_hostname=SIM_HOST, backoff=Backoff(0.05, 0.2))
        tasks = [asyncio.create_task(controller.run())]
        await eventually(lambda: controller.stats.connected)
        for i in range(5):  # accepted before the broker side has any session
            supervisor.send(Payload(9, i, bytes([i]), TLCS[0]))
        tasks.append(asyncio.create_task(supervisor.run()))
        try:
            await eventually(lambda: len(delivered) == 5)
            assert [p.payload for p in delivered] == [bytes([i]) for i in range(5)]
        finally:
            for task in tasks:
                task.cancel()


async def test_plain_and_wrong_security_mode(sim: Sim) -> None:
    async with sim.api(sim.broker) as api:
        plain = await api.create_session(session_request(DOMAIN, "broker", [TLCS[0]], security="NONE"))
    assert plain.details.listener.port == sim.service.registry.listeners["NONE"][1]
    tls_session = await new_session(sim, tlcs=(TLCS[1],))
    reader, writer = await asyncio.open_connection(plain.details.listener.host, plain.details.listener.port)
    writer.write(b"\x01" + encode(Token(tls_session.token)))  # a TLS session's token on the plain listener
    assert await read_all(reader) == [Bye("session is for security mode TLSv1.2")]
    try:
        await asyncio.open_connection(plain.details.listener.host, tls_session.details.listener.port,
                                      ssl=_tls13_only(sim), server_hostname=SIM_HOST)
        raise AssertionError("a TLS 1.3-only client must not get a session (TLEX 6.1: TLS 1.2)")
    except (ssl.SSLError, ConnectionError):
        pass


def _tls13_only(sim: Sim) -> ssl.SSLContext:
    context = sim.stream_ssl()
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


async def test_supervisor_handles_framing_error_and_hung_service(sim: Sim) -> None:
    async with sim.api(sim.broker) as api:
        supervisor = SessionSupervisor(api, session_request(DOMAIN, "broker", list(TLCS)), stream_ssl=sim.stream_ssl(),
                                       on_payload=lambda p: None, server_hostname=SIM_HOST, backoff=Backoff(0.05, 0.2))
        task = asyncio.create_task(supervisor.run())
        try:
            await eventually(lambda: up(sim, supervisor, 1))
            assert sim.service.inject(b"\xab\xcd\x00\x01\x00") == 1  # out of sync: the client drops the connection
            await eventually(lambda: up(sim, supervisor, 2))
            loop = asyncio.get_running_loop()
            muted_at = loop.time()
            assert sim.service.mute() == 1  # the service sends nothing more: the keep-alive timeout (1.5 s) acts
            await eventually(lambda: up(sim, supervisor, 3), timeout=8)
            assert loop.time() - muted_at >= 1.4
            assert supervisor.stats.closes == {"framing": 1, "keepalive": 1}
        finally:
            task.cancel()


async def test_controllers_the_service_plays_stream_like_real_ones(sim_pki: TestPki) -> None:
    """``tlex-sim --virtual``: 200 controllers without a session each. A Broker session holding 150 of
    them gets their MAPEMs and SPATEMs, the controllers on phases spread over the period, and
    nothing of the other 50; a Monitor sees them wrapped (publisher ``played:<TLC>``); an SREM
    reaches only its controller, whose SSEM comes back."""
    specs = [ControllerSpec(f"NLVC{i:04d}", [f"5-{i}"], i) for i in range(200)]
    sim, played = await start_virtual_sim(sim_pki, specs, spatem_hz=5, mapem_interval=60)
    received: list[Payload] = []
    monitored: list[Payload] = []
    tasks = []
    try:
        async with sim.api(sim.broker) as broker_api, sim.api(sim.monitor) as monitor_api:
            held = [s.tlc_id for s in specs[:150]]
            bridge = SessionSupervisor(broker_api, session_request(DOMAIN, "broker", held), stream_ssl=sim.stream_ssl(),
                                       on_payload=received.append, server_hostname=SIM_HOST)
            monitor = SessionSupervisor(monitor_api, session_request(DOMAIN, "monitor", [specs[0].tlc_id]),
                                        stream_ssl=sim.stream_ssl(), on_payload=monitored.append,
                                        server_hostname=SIM_HOST)
            tasks = [asyncio.create_task(bridge.run()), asyncio.create_task(monitor.run())]
            await asyncio.wait_for(asyncio.gather(bridge.connected.wait(), monitor.connected.wait()), 5)
            await asyncio.sleep(1.5)
            await eventually(lambda: {p.tlc for p in received if kind_of(p.payload_type) == "SPATEM"} == set(held),
                             timeout=10, what="SPATEMs of every held controller")
            assert {p.tlc for p in received} == set(held)
            assert played.sent["MAPEM"] == 200  # every controller sent its map once (the first went nowhere)
            spatem_ticks = sorted(p.origin_ms % 200 for p in received if kind_of(p.payload_type) == "SPATEM")
            assert spatem_ticks[-1] - spatem_ticks[0] > 100  # phases spread over the 200 ms period
            await eventually(lambda: bool(monitored), what="a monitor payload")
            wrapped = decode_monitor_payload(monitored[0].payload)
            assert wrapped.publisher_token == f"played:{specs[0].tlc_id}" and monitored[0].tlc == specs[0].tlc_id
            srem = Payload(MESSAGE_IDS["SREM"], read_now().utc_ms, stand_in("SREM", 1, "5-149", 1), "NLVC0149")
            bridge.send(srem)
            await eventually(lambda: any(kind_of(p.payload_type) == "SSEM" for p in received), what="the SSEM")
            assert list(played.from_broker) == ["NLVC0149"]
            assert [p.tlc for p in received if kind_of(p.payload_type) == "SSEM"] == ["NLVC0149"]
    finally:
        for task in tasks:
            task.cancel()
        await played.stop()
        await sim.service.close()
