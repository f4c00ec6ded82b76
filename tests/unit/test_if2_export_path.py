"""The IF2 bridge's export path in one process, no socket: a C-ITS actor's messages through the broker's
in-process door into a real broker core, the bridge's subscription consuming them through the door,
each published on the bridge's AMQP 0-9-1 connection (its bytes read back with pamqp, the codec
RabbitMQ's Python clients share) and settled at the BI once RabbitMQ's confirm came.

What the bridge keeps between messages (the envelope and identity by the properties object, the
envelope by the properties' values, the 0-9-1 properties by position and ttl) must never give one
message another's routing key, position, TTL or identity."""
from __future__ import annotations

import asyncio
from typing import Any

from pamqp import commands, frame, header
from proton import Message

from certs import TestPki
from interchange.bridges.if2.amqp091 import Connection
from interchange.bridges.if2.amqp091_io import Client
from interchange.bridges.if2.bridge import If2Bridge, NodeView
from interchange.bridges.if2.config import If2Config
from interchange.bridges.if2.rabbit import Session
from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.local_door import DoorOutcome, LocalDoor
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.ttl_policy import TtlPolicy

BRIDGE, ACTOR, TARGET, SOURCE = "actor-x", "actor-y", "actor-in", "bridge-subscription"
TILE, OTHER_TILE = "120202130121133020", "120202130121133021"
SPATEM = {"messageType": "SPATEM", "protocolVersion": "SPATEM:2.1.1", "publisherId": "NL00001",
          "publicationId": "NL00001:spat-1", "originatingCountry": "NL", "quadTree": f",{TILE},"}


class Wire(asyncio.Transport):
    """What the bridge's 0-9-1 connection writes."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def write(self, data: Any) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass

    def pause_reading(self) -> None:  # (a read confirming many publishes rests the socket)
        pass

    def resume_reading(self) -> None:
        pass

    def published(self) -> list[tuple[str, str, Any, bytes]]:
        """Each basic.publish written so far: exchange, routing key, properties, body."""
        out: list[tuple[str, str, Any, bytes]] = []
        data = bytes(self.data)
        while data:
            size, _, value = frame.unmarshal(data)
            data = data[size:]
            if isinstance(value, commands.Basic.Publish):
                out.append((value.exchange, value.routing_key, None, b""))
            elif isinstance(value, header.ContentHeader):
                out[-1] = (*out[-1][:2], value.properties, b"")
            elif not isinstance(value, commands.Basic.Publish) and out and hasattr(value, "value"):
                out[-1] = (*out[-1][:3], out[-1][3] + value.value)
        return out


def wire(*frames: tuple[int, Any]) -> bytes:
    return b"".join(frame.marshal(value, channel) for channel, value in frames)


#: What a broker offering SASL EXTERNAL sends to open a connection: start, tune (no heartbeat), open-ok.
OPENING = wire((0, commands.Connection.Start(mechanisms="EXTERNAL")),
               (0, commands.Connection.Tune(frame_max=131072, heartbeat=0)),
               (0, commands.Connection.OpenOk()))


async def export_path(pki: TestPki) -> tuple[If2Bridge, Client, Wire, Any]:
    identity = pki.identity(BRIDGE)
    config = If2Config(url="amqps://127.0.0.1:5671/", actor=BRIDGE, exports={"SPAT": ["#"]},
                       tls={"cert_chain": identity.chain, "key": identity.key, "trust_bundle": pki.trust_bundle},
                       providers=[{"name": "RWS", "publisher_id": "NL00001", "coverage": ["1202"]}])
    book = AddressBook()
    book.load([TargetSpec(address=TARGET, publishers=frozenset({ACTOR}), selector="TRUE")],
              [SourceSpec(address=SOURCE, consumers=frozenset({BRIDGE}), selector="messageType = 'SPATEM'")])
    door = LocalDoor(BrokerCore(book, Admission(TtlPolicy()), BrokerObserver(None)), 1 << 20, lambda: True)
    bridge = If2Bridge(config, NodeView("node.test", "127.0.0.1", 1, "https://127.0.0.1:1", door), lambda *_: None)
    bridge.bi.set_source(SOURCE, None, lambda raw, tag: bridge._on_croads_all([raw], [tag]), bridge._on_croads_all)
    client, transport = Client(Connection()), Wire()
    client.on_confirmed = bridge._on_confirmed  # (as the bridge's RabbitMQ link sets it)
    client.connection_made(transport)
    client.data_received(OPENING)
    client.amqp.send(1, commands.Channel.Open())
    client.amqp.send(1, commands.Confirm.Select())
    client.data_received(wire((1, commands.Channel.OpenOk()), (1, commands.Confirm.SelectOk())))
    bridge.rabbit.session = Session(client, {"SPAT"})
    return bridge, client, transport, door.open(ACTOR, TARGET)


async def test_each_exported_message_gets_its_own_key_position_ttl_and_copy(pki: TestPki) -> None:
    bridge, client, transport, publisher = await export_path(pki)
    cases: list[tuple[dict[str, Any], float | None, bytes]] = [
        (SPATEM, 60.0, b"a"), (SPATEM, 5.0, b"b"), ({**SPATEM, "quadTree": f",{OTHER_TILE},"}, 60.0, b"c"),
        ({**SPATEM, "latitude": 51.485992, "longitude": 4.735311}, 60.0, b"d"), (SPATEM, None, b"e"),
        (SPATEM, 60.0, b"a"),  # the first again: IF2 has it (IF2 6.4 rule 1), not published twice
        ({**SPATEM, "publicationId": "NL00001:spat-2"}, 60.0, b"a")]  # another publication: published
    answers: list[DoorOutcome] = []
    for properties, ttl, body in cases:
        message = Message(body=body, properties=properties, inferred=True)
        if ttl is not None:
            message.ttl = ttl
        publisher.publish(message.encode(), answers.append)
    for _ in range(3):
        await asyncio.sleep(0)
    published = transport.published()
    prefix = "SPAT.2_1_1.RWS.0."
    assert [(e, k) for e, k, _, _ in published] == [("SPAT", prefix + ".".join(t)) for t in
                                                   (TILE, TILE, OTHER_TILE, TILE, TILE, TILE)]
    assert [b for _, _, _, b in published] == [b"a", b"b", b"c", b"d", b"e", b"a"]
    assert [p.expiration for _, _, p, _ in published] == ["60000", "5000", "60000", "60000", None, "60000"]
    positions = [(str(p.headers["lat"]), str(p.headers["lon"]), p.headers.get("ttl")) for _, _, p, _ in published]
    centre, other_centre = ("51.4860865", "4.7357941"), ("51.4860865", "4.7371674")  # the tiles' centres
    assert positions == [(*centre, 60000), (*centre, 5000), (*other_centre, 60000), ("51.4859920", "4.7353110", 60000),
                         (*centre, None), (*centre, 60000)]
    assert all(answer.accepted for answer in answers)
    assert bridge.counts["exported"] == 0 and len(bridge.bi.receiver.unsettled) == 7  # type: ignore[union-attr]
    client.data_received(wire((1, commands.Basic.Ack(len(published), True))))  # RabbitMQ confirms them all
    for _ in range(3):  # (the repeated copy waited for the first one's confirm)
        await asyncio.sleep(0)
    assert bridge.counts["exported"] == 6 and not bridge.bi.receiver.unsettled  # type: ignore[union-attr]
