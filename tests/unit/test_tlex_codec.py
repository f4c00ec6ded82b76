"""TCPStreaming 0x01 codec (TLEX 6.2-6.3): exact bytes of every datagram, framing errors, fuzzing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interchange.bridges.tlex.codec import (
    Bye,
    DatagramError,
    FramingError,
    KeepAlive,
    MonitorPayload,
    Payload,
    Reconnect,
    StreamDecoder,
    StreamError,
    TimestampsRequest,
    TimestampsResponse,
    Token,
    VersionError,
    decode_monitor_payload,
    encode,
    encode_monitor_payload,
)

SPEC_EXAMPLE = bytes.fromhex("01" "aabb0001" "00" "aabb0004" "04010323")  # the stream drawn in 6.3.2


def test_exact_bytes_of_each_datagram() -> None:
    assert encode(KeepAlive()) == bytes.fromhex("aabb0001" "00")
    assert encode(Token("abc")) == bytes.fromhex("aabb0004" "01") + b"abc"
    assert encode(Bye()) == bytes.fromhex("aabb0001" "02")
    assert encode(Bye("bye now")) == bytes.fromhex("aabb0008" "02") + b"bye now"
    assert encode(Reconnect()) == bytes.fromhex("aabb0001" "03")
    assert encode(Payload(0x21, 0x0102030405060708, b"\xde\xad")) == bytes.fromhex(
        "aabb000c" "04" "21" "0102030405060708" "dead")
    assert encode(Payload(0x21, 1, b"\xde\xad", "NLZH0023")) == bytes.fromhex(
        "aabb0014" "05") + b"NLZH0023" + bytes.fromhex("21" "0000000000000001" "dead")
    assert encode(TimestampsRequest(5)) == bytes.fromhex("aabb0009" "06" "0000000000000005")
    assert encode(TimestampsResponse(1, 2, 3)) == bytes.fromhex(
        "aabb0019" "07" "0000000000000001" "0000000000000002" "0000000000000003")


def test_spec_example_stream_decodes() -> None:
    decoder = StreamDecoder()
    # the second frame of the spec's drawing is a 0x04 datagram cut short: a clear error, not a crash
    with pytest.raises(DatagramError) as caught:
        decoder.feed(SPEC_EXAMPLE)
    assert caught.value.decoded == [KeepAlive()]


def test_round_trip_byte_by_byte() -> None:
    datagrams = [KeepAlive(), Token("tok"), Payload(1, 2, b"x" * 300, "tlc_0001"), Payload(2, 3, b""),
                 TimestampsRequest(9), TimestampsResponse(1, 2, 3), Bye("done"), Reconnect()]
    stream = b"\x01" + b"".join(encode(d) for d in datagrams)
    decoder = StreamDecoder()
    got = [d for i in range(len(stream)) for d in decoder.feed(stream[i:i + 1])]
    assert got == datagrams
    assert decoder.buffered == 0


def test_prefix_mismatch_is_detected_at_once() -> None:
    decoder = StreamDecoder()
    assert decoder.feed(b"\x01" + encode(KeepAlive())) == [KeepAlive()]
    with pytest.raises(FramingError):
        decoder.feed(b"\xaa\xbc")  # detected on the two prefix bytes, before any size arrives
    with pytest.raises(FramingError):
        decoder.feed(encode(KeepAlive()))  # poisoned: no resynchronisation


def test_empty_frame_is_a_framing_error() -> None:
    with pytest.raises(FramingError, match="empty frame"):
        StreamDecoder().feed(b"\x01\xaa\xbb\x00\x00")


def test_wrong_version_preamble() -> None:
    with pytest.raises(VersionError):
        StreamDecoder().feed(b"\x02" + encode(KeepAlive()))


@pytest.mark.parametrize("data, message", [
    (b"\x08", "unknown datagram type 0x08"),
    (b"\x00\x00", "KeepAlive datagram has 2 bytes"),
    (b"\x03\x01", "Reconnect datagram has 2 bytes"),
    (b"\x05NLZH00", "shorter than its header"),
    (b"\x06\x00", "Timestamps request datagram has 2 bytes"),
    (b"\x01\xff", "token is not ASCII"),
])
def test_malformed_datagrams(data: bytes, message: str) -> None:
    frame = b"\xaa\xbb" + len(data).to_bytes(2, "big") + data
    with pytest.raises(DatagramError, match=message):
        StreamDecoder().feed(b"\x01" + frame)


def test_encode_refuses_what_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="8 ASCII characters"):
        encode(Payload(1, 1, b"", "SHORT"))
    with pytest.raises(ValueError, match="does not fit one frame"):
        encode(Payload(1, 1, b"x" * 0xFFFF))
    with pytest.raises(ValueError, match="one byte"):
        encode(Payload(256, 1, b""))
    with pytest.raises(ValueError, match="ASCII"):
        encode(Token("tökén"))
    largest = encode(Payload(1, 1, b"x" * (0xFFFF - 10)))
    assert largest[2:4] == b"\xff\xff"


def test_monitor_payload_round_trip() -> None:
    monitor = MonitorPayload("pub-token", 10, 11, 0x21, b"spat")
    data = encode_monitor_payload(monitor)
    assert data[:4] == b"\x00\x00\x00\x09" and data[4:13] == b"pub-token"
    assert decode_monitor_payload(data) == monitor
    assert decode_monitor_payload(encode_monitor_payload(MonitorPayload("", 1, 2, 3, b""))).publisher_token == ""
    with pytest.raises(DatagramError):
        decode_monitor_payload(data[:15])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=12))
def test_fuzz_decoder_never_crashes(chunks: list[bytes]) -> None:
    decoder = StreamDecoder()
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except StreamError:
            return


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(1, 5), max_size=5))
def test_fuzz_frames_with_valid_headers(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"\x01" + b"".join(b"\xaa\xbb" + len(b).to_bytes(2, "big") + b for b in bodies)
    decoder, pos = StreamDecoder(), 0
    for cut in cuts + [len(stream)]:
        try:
            decoder.feed(stream[pos:pos + cut])
        except StreamError:
            return
        pos += cut


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.just(KeepAlive()), st.just(Reconnect()),
    st.builds(Token, st.text(alphabet=st.characters(max_codepoint=127), max_size=40)),
    st.builds(Bye, st.text(alphabet=st.characters(max_codepoint=127), max_size=40)),
    st.builds(Payload, st.integers(0, 255), st.integers(0, 2**64 - 1), st.binary(max_size=200),
              st.one_of(st.none(), st.text(alphabet="ABCDEFGH0123456789", min_size=8, max_size=8))),
    st.builds(TimestampsRequest, st.integers(0, 2**64 - 1)),
    st.builds(TimestampsResponse, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
), max_size=10))
def test_fuzz_round_trip(datagrams: list) -> None:
    stream = b"\x01" + b"".join(encode(d) for d in datagrams)
    assert StreamDecoder().feed(stream) == datagrams
