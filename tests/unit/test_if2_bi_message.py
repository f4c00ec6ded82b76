"""The AMQP 1.0 message the IF2 bridge sends to the BI, from proton-encoded sections: decoded, it is
the message proton's ``Message(body, properties, inferred=True, ttl)`` would be, byte for byte body."""
from __future__ import annotations

import pytest
from proton import Message

from interchange.bridges.if2.bi_message import application_properties, message

PROPERTIES = {"messageType": "DENM", "publisherId": "NL00001", "publicationId": "NL00001:if2-DENM-1.2.1",
              "originatingCountry": "NL", "protocolVersion": "DENM:1.2.1", "quadTree": ",120202130121133020,",
              "causeCode": 5, "subCauseCode": 0, "latitude": 51.9000001, "longitude": 4.4}


@pytest.mark.parametrize("body", [b"", b"\x00\x01\xff" * 30, bytes(range(256)) * 400])  # vbin8 and vbin32
@pytest.mark.parametrize("ttl_ms", [None, 0, 59_999, 2**32 - 1])
def test_decoded_it_is_the_message_proton_would_encode(body: bytes, ttl_ms: int | None) -> None:
    raw = message(application_properties(PROPERTIES), body, ttl_ms)
    got, reference = Message(), Message(body=body, properties=PROPERTIES, inferred=True)
    if ttl_ms is not None:
        reference.ttl = ttl_ms / 1000
    got.decode(raw)
    again = Message()
    again.decode(reference.encode())
    assert got.properties == again.properties == PROPERTIES
    assert bytes(got.body) == bytes(again.body) == body and got.inferred and again.inferred
    assert got.ttl == again.ttl and got.durable == again.durable and got.priority == again.priority


def test_a_ttl_that_ran_out_is_sent_as_zero() -> None:
    got = Message()
    got.decode(message(application_properties(PROPERTIES), b"x", -5))
    assert got.ttl == 0
