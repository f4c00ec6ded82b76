"""An AMQP 0-9-1 client connection, sans-I/O: bytes in, events out, bytes to send (IF2 6: the
bridge's link to the IF2 RabbitMQ). The frame codec is pamqp's (the one aiormq and aio-pika use);
this module only keeps the protocol's state: the opening handshake (SASL EXTERNAL or PLAIN, tune,
the virtual host, IF2 6.1), channels, content assembly of ``basic.deliver``, publisher confirms
and heartbeats (a publish's content header and body frames are written here, as pamqp writes them,
its properties encoded once per properties object: the publisher does not change one it gave). No
socket, no task, no future: :class:`Connection.receive` turns what arrived into a list of events;
every method that sends appends frames to :meth:`Connection.take_output`, so a caller writes once
per loop turn however many messages it handled.

The deliveries that come whole in a row (``basic.deliver``, a content header whose properties were
decoded before, one body frame) are read by the C reader ``_deliveries`` when it is built (not with
``INTERCHANGE_PURE_PYTHON=1``, or ``accelerated=False``): it stops at any other frame, which the
Python code below reads (and judges), so both paths give the same events and the same errors.

Events: :class:`Reply` (a synchronous method's answer, the opening's ``connection.open-ok``
included), :class:`Delivery` (one whole message of a consumer), :class:`Confirmed` (publisher
confirms: the tokens :meth:`Connection.publish` was given, acked or nacked by the broker, AMQP
0-9-1 ``basic.ack``/``nack`` with ``multiple``) and :class:`Closed` (the broker closed a channel or
the connection, or its heartbeats stopped; the tokens of unconfirmed publishes come with it).
"""
from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pamqp import base, body, commands, constants, frame, header, heartbeat
from pamqp.exceptions import PAMQPException

from interchange.broker.admission import PURE_PYTHON_ENV

#: interchange.bridges.if2._deliveries.read (_deliveries.pyi), or None when the module is not built
_c_read: Callable[..., int] | None
try:
    from interchange.bridges.if2._deliveries import read as _c_read
except ImportError:  # not built (no compiler): every delivery is read in Python
    _c_read = None

__all__ = ["Closed", "Confirmed", "Connection", "Delivery", "ProtocolError", "Reply"]

Properties = commands.Basic.Properties
_FRAME = _FRAME_START = struct.Struct(">BHI")
_CONTENT_HEADER = struct.Struct(">BHIHxxQ")  #: frame start, then class id, weight (0), body size
FRAME_METHOD, FRAME_HEADER, FRAME_BODY = constants.FRAME_METHOD, constants.FRAME_HEADER, constants.FRAME_BODY
_BASIC, _FRAME_END, _FRAME_END_BYTE = 60, constants.FRAME_END_CHAR, constants.FRAME_END
_BASIC_CLASS, _BASIC_DELIVER = b"\x00\x3c", b"\x00\x3c\x00\x3c"  #: class basic (60), method deliver (60)
#: publisher confirms: basic.ack (60, 80) and basic.nack (60, 120), each a delivery tag and one octet of bits
_BASIC_ACK, _BASIC_NACK = b"\x00\x3c\x00\x50", b"\x00\x3c\x00\x78"
_BODY_SIZE, _TAG_AND_BITS = struct.Struct(">Q"), struct.Struct(">QB")
_HEARTBEAT = frame.marshal(heartbeat.Heartbeat(), 0)
PUBLISH_FRAMES = 4096
#: what the client tells the broker it understands (RabbitMQ sends basic.nack and basic.cancel only then)
CAPABILITIES = {"publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True}


class ProtocolError(Exception):
    """The broker's bytes are not AMQP 0-9-1 as this client speaks it."""


@dataclass(frozen=True, slots=True)
class Reply:
    channel: int
    method: base.Frame


class Delivery(NamedTuple):
    """One whole message of a consumer (a tuple: one is built per message read)."""
    channel: int
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: Any  #: pamqp's ``Basic.Properties``
    body: bytes


@dataclass(frozen=True, slots=True)
class Confirmed:
    channel: int
    tokens: tuple[Any, ...]
    ack: bool  #: False: the broker nacked them (it did not take them)


@dataclass(frozen=True, slots=True)
class Closed:
    """Channel ``channel`` (0: the connection) is closed; ``unconfirmed``: tokens never confirmed."""
    channel: int
    code: int
    text: str
    unconfirmed: tuple[Any, ...] = ()


Event = Reply | Delivery | Confirmed | Closed


_NONE = object()  #: (no token: a sequence number confirmed before)

#: a NamedTuple of its fields in order, without its generated ``__new__`` (two of them per message read)
_tuple_new = tuple.__new__


class _Deliver(NamedTuple):
    """What a delivery keeps of its ``basic.deliver``."""
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str


def _shortstr(buffer: bytearray, at: int, stop: int) -> tuple[str, int]:
    end = at + 1 + buffer[at] if at < stop else stop + 1
    if end > stop:
        raise ProtocolError("a basic.deliver frame shorter than its fields")
    try:
        return buffer[at + 1:end].decode("utf-8"), end
    except UnicodeDecodeError:
        raise ProtocolError("a basic.deliver field that is not UTF-8") from None


def _deliver(buffer: bytearray, at: int, stop: int, known: dict[bytes, tuple[str, str, str]]) -> _Deliver:
    """The arguments of ``basic.deliver`` (0-9-1 1.8.3.9: consumer-tag, delivery-tag, redelivered,
    exchange, routing-key) from ``at`` to the frame's end ``stop``: all of them, and nothing after.
    ``known``: the three names by their bytes (the frame less its delivery-tag and redelivered), as
    read before: a consumer's deliveries repeat a few of them."""
    tag_at = at + 1 + buffer[at] if at < stop else stop + 1
    if tag_at + 9 > stop:
        raise ProtocolError("a basic.deliver frame shorter than its fields")
    tag, bits = _TAG_AND_BITS.unpack_from(buffer, tag_at)
    key = bytes(buffer[at:tag_at]) + bytes(buffer[tag_at + 9:stop])
    names = known.get(key)
    if names is None:
        consumer_tag, _ = _shortstr(buffer, at, stop)
        exchange, at = _shortstr(buffer, tag_at + 9, stop)
        routing_key, at = _shortstr(buffer, at, stop)
        if at != stop:
            raise ProtocolError(f"a basic.deliver frame with {stop - at} bytes after its fields")
        if len(known) >= PUBLISH_FRAMES:
            known.clear()
        names = known[key] = (consumer_tag, exchange, routing_key)
    return _tuple_new(_Deliver, (tag, bool(bits & 1), names[1], names[2]))


@dataclass
class _Channel:
    confirming: bool = False
    published: int = 0  #: the last publish sequence number (confirm mode)
    unconfirmed: dict[int, Any] = field(default_factory=dict)  #: sequence number -> token, in order
    #: every sequence number below this one is confirmed: a ``multiple`` confirm looks from here, not
    #: from the dict's first key (found by skipping the slots of every key popped before it)
    confirmed_below: int = 1
    deliver: "_Deliver | None" = None  #: a delivery whose content is being assembled
    content: Any = None
    size: int = 0
    parts: list[bytes] = field(default_factory=list)


class Connection:
    """One client connection. :meth:`start` first; then feed :meth:`receive` and send
    :meth:`take_output`; ``opened`` once the broker's ``connection.open-ok`` came."""

    def __init__(self, vhost: str = "/", mechanism: Literal["EXTERNAL", "PLAIN"] = "EXTERNAL",
                 username: str = "", password: str = "", heartbeat_s: int = 60, product: str = "c-roads-if2",
                 accelerated: bool | None = None) -> None:
        if accelerated is None:
            accelerated = _c_read is not None and os.environ.get(PURE_PYTHON_ENV) != "1"
        elif accelerated and _c_read is None:
            raise ImportError("the C reader interchange.bridges.if2._deliveries is not built")
        self._c_read = _c_read if accelerated else None
        self.vhost, self.mechanism, self._credentials = vhost, mechanism, (username, password)
        self.heartbeat_s, self.product = heartbeat_s, product
        self.frame_max = 131072
        self.opened = self.closed = False
        self._in = bytearray()
        self._out: list[bytes] = []
        self._channels: dict[int, _Channel] = {}
        self._publish_frames: dict[tuple[int, str, str], bytes] = {}  #: basic.publish frames by channel, exchange, key
        #: the encoded properties (flags and list) of a content header, by the properties object (kept with
        #: it, so that its id is not another's): a publisher gives the same few objects again and again
        self._encoded_properties: dict[int, tuple[Any, bytes]] = {}
        #: decoded content-header properties by their encoded bytes (IF2 publishers repeat them)
        self._decoded_properties: dict[bytes, Any] = {}
        #: consumer tag, exchange and routing key of a basic.deliver by their bytes (:func:`_deliver`)
        self._deliver_names: dict[bytes, tuple[str, str, str]] = {}
        self._sent_at = self._received_at = 0.0

    # ------------------------------------------------------------------ sending
    def start(self, now: float = 0.0) -> None:
        self._sent_at = self._received_at = now
        self._out.append(header.ProtocolHeader().marshal())

    def take_output(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def send(self, channel: int, method: base.Frame) -> None:
        """Any method frame (a declaration, a binding, basic.qos, basic.consume ...); its answer comes
        as a :class:`Reply` on the same channel."""
        if isinstance(method, commands.Channel.Open):
            self._channels[channel] = _Channel()
        elif isinstance(method, commands.Confirm.Select):
            self._channels[channel].confirming = True
        self._out.append(frame.marshal(method, channel))

    def publish(self, channel: int, exchange: str, routing_key: str, properties: Any, payload: bytes,
                token: Any = None) -> None:
        """basic.publish and its content; on a confirm channel ``token`` comes back in :class:`Confirmed`."""
        state = self._channels[channel]
        out = self._out
        method = self._publish_frames.get((channel, exchange, routing_key))
        if method is None:  # (the same few keys come again and again: their frame is kept, at most PUBLISH_FRAMES)
            if len(self._publish_frames) >= PUBLISH_FRAMES:
                self._publish_frames.clear()
            method = self._publish_frames[channel, exchange, routing_key] = frame.marshal(
                commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
        out.append(method)
        kept = self._encoded_properties.get(id(properties))
        if kept is None or kept[0] is not properties:
            if len(self._encoded_properties) >= PUBLISH_FRAMES:
                self._encoded_properties.clear()
            kept = self._encoded_properties[id(properties)] = (properties, properties.marshal())
        encoded = kept[1]
        # the content header frame as pamqp writes it: class basic, weight 0, the body size, the properties;
        # each frame's parts go to the output as they are (the body not copied before :meth:`take_output`)
        size = len(payload)
        out += (_CONTENT_HEADER.pack(FRAME_HEADER, channel, 12 + len(encoded), _BASIC, size), encoded, _FRAME_END)
        step = self.frame_max - 8 if self.frame_max else size or 1
        if size <= step:  # (one body frame: nearly every message)
            if size:
                out += (_FRAME_START.pack(FRAME_BODY, channel, size), payload, _FRAME_END)
        else:
            for start in range(0, size, step):
                chunk = payload[start:start + step]
                out += (_FRAME_START.pack(FRAME_BODY, channel, len(chunk)), chunk, _FRAME_END)
        if state.confirming:
            state.published += 1
            state.unconfirmed[state.published] = token

    def publish_run(self, channel: int, exchange: str, routing_key: str, properties: Any, payloads: Sequence[bytes],
                    tokens: Sequence[Any]) -> None:
        """:meth:`publish` of each of ``payloads`` (its token the one of ``tokens`` at the same place), all to
        one exchange and routing key with one properties object: the same frames, their method frame
        and encoded properties found once for the run, no Python call per message."""
        if not payloads:
            return
        self.publish(channel, exchange, routing_key, properties, payloads[0], tokens[0])  # (keeps both caches)
        if len(payloads) == 1:
            return
        method = self._publish_frames[channel, exchange, routing_key]
        encoded = self._encoded_properties[id(properties)][1]
        state, out, pack_header, pack_start = self._channels[channel], self._out, _CONTENT_HEADER.pack, _FRAME_START.pack
        header_size, step = 12 + len(encoded), self.frame_max - 8 if self.frame_max else 0
        for payload in payloads[1:]:
            size = len(payload)
            if size > step or not size:  # (a body of several frames, or none: as :meth:`publish` writes it)
                self.publish(channel, exchange, routing_key, properties, payload, None)
                continue
            out += (method, pack_header(FRAME_HEADER, channel, header_size, _BASIC, size), encoded, _FRAME_END,
                    pack_start(FRAME_BODY, channel, size), payload, _FRAME_END)
            if state.confirming:
                state.published += 1
        if state.confirming:  # (the run's sequence numbers are the last ones published, in order)
            unconfirmed, first = state.unconfirmed, state.published - len(payloads) + 1
            unconfirmed.update(zip(range(first, state.published + 1), tokens))

    def ack(self, channel: int, delivery_tag: int, multiple: bool = False) -> None:
        self._out.append(frame.marshal(commands.Basic.Ack(delivery_tag, multiple), channel))

    def reject(self, channel: int, delivery_tag: int, requeue: bool = False) -> None:
        self._out.append(frame.marshal(commands.Basic.Reject(delivery_tag, requeue), channel))

    def close(self, code: int = 200, text: str = "closed") -> None:
        """connection.close; :class:`Closed` (channel 0) comes with the broker's close-ok."""
        self._out.append(frame.marshal(commands.Connection.Close(code, text, 0, 0), 0))

    def tick(self, now: float) -> Closed | None:
        """Heartbeats, every ``heartbeat_s / 2`` seconds (none when it is 0): one is sent when nothing
        was sent since the last tick; :class:`Closed` when nothing came for two intervals (the broker
        or the path to it is gone: the caller drops the connection)."""
        if not self.heartbeat_s or not self.opened or self.closed:
            return None
        if now - self._received_at > 2 * self.heartbeat_s:
            self.closed = True
            return Closed(0, 0, f"no frame from the broker for {now - self._received_at:.0f} s (heartbeat "
                                f"{self.heartbeat_s} s)")
        if now - self._sent_at >= self.heartbeat_s / 2 - 0.5:
            self._out.append(_HEARTBEAT)
            self._sent_at = now
        return None

    def sent(self, now: float) -> None:
        """The caller wrote output at ``now`` (a heartbeat is only needed on a quiet connection)."""
        self._sent_at = now

    def lost(self) -> tuple[Any, ...]:
        """The transport went: every channel is gone; the tokens of the publishes never confirmed."""
        self.closed = True
        return tuple(t for n in list(self._channels) for t in self._channels.pop(n).unconfirmed.values())

    # ------------------------------------------------------------------ receiving
    def receive(self, data: bytes, now: float = 0.0) -> list[Event]:
        """Events for what arrived; raises :class:`ProtocolError` on bytes that are not AMQP 0-9-1.

        The three frames of each delivery are read here, at once when they are whole in the buffer
        (:meth:`_whole_delivery`), else one by one (:meth:`_content_frame`), and so are publisher confirms
        (``basic.ack``/``basic.nack``); any other frame by pamqp."""
        self._received_at = now
        buffer = self._in
        buffer += data
        events: list[Event] = []
        offset, end = 0, len(buffer)
        c_read = self._c_read
        while end - offset >= 8:
            if c_read is not None:  # the whole deliveries from here (C); then the frame it stopped at
                offset = c_read(buffer, offset, self._channels, self._decoded_properties, self._deliver_names,
                                Delivery, events)
                if end - offset < 8:
                    break
            if buffer[offset:offset + 4] == b"AMQP":
                raise ProtocolError(f"the broker wants protocol {bytes(buffer[offset:offset + 8])!r}")
            kind, channel, size = _FRAME.unpack_from(buffer, offset)
            if end - offset < size + 8:
                break
            if kind == FRAME_METHOD and (taken := self._whole_delivery(buffer, channel, offset, size, end, events)):
                offset = taken
                continue
            if not self._content_frame(buffer, kind, channel, offset + 7, offset + 7 + size, events):
                try:
                    _, _, value = frame.unmarshal(bytes(buffer[offset:offset + size + 8]))
                except PAMQPException as exc:
                    raise ProtocolError(f"a frame pamqp cannot read: {exc}") from None
                if isinstance(value, header.ContentHeader):  # (a properties section not seen yet: kept)
                    self._keep_properties(bytes(buffer[offset + 19:offset + 7 + size]), value.properties)
                if kind != constants.FRAME_HEARTBEAT:
                    self._frame(channel, value, events)
            offset += size + 8
        del buffer[:offset]
        return events

    def _whole_delivery(self, buffer: bytearray, channel: int, offset: int, size: int, end: int,
                        events: list[Event]) -> int:
        """A delivery whose three frames are all in ``buffer`` from ``offset`` (``basic.deliver``, a content
        header whose properties section came before, one body frame of the whole size), read at once: the
        offset after them, or 0 when they are not that (then each frame is read on its own, as any other)."""
        start, stop = offset + 7, offset + 7 + size
        if buffer[start:start + 4] != _BASIC_DELIVER or buffer[stop] != _FRAME_END_BYTE:
            return 0
        at = stop + 1
        if end - at < 8:
            return 0
        kind, header_channel, header_size = _FRAME.unpack_from(buffer, at)
        header_stop = at + 7 + header_size
        if (kind != FRAME_HEADER or header_channel != channel or header_size < 14 or header_stop >= end
                or buffer[header_stop] != _FRAME_END_BYTE or buffer[at + 7:at + 9] != _BASIC_CLASS):
            return 0
        properties = self._decoded_properties.get(bytes(buffer[at + 19:header_stop]))
        state = self._channels.get(channel)
        if properties is None or state is None:
            return 0
        body_size = _BODY_SIZE.unpack_from(buffer, at + 11)[0]
        at = header_stop + 1
        if body_size:
            if end - at < 8:
                return 0
            kind, body_channel, body_frame = _FRAME.unpack_from(buffer, at)
            if (kind != FRAME_BODY or body_channel != channel or body_frame != body_size
                    or at + 7 + body_size >= end or buffer[at + 7 + body_size] != _FRAME_END_BYTE):
                return 0
            payload = bytes(buffer[at + 7:at + 7 + body_size])
            at += 8 + body_size
        else:
            payload = b""
        deliver = _deliver(buffer, start + 4, stop, self._deliver_names)  # (raises on a frame not 0-9-1)
        state.deliver, state.content, state.size, state.parts = None, None, 0, []
        events.append(_tuple_new(Delivery, (channel, deliver.delivery_tag, deliver.redelivered, deliver.exchange,
                                             deliver.routing_key, properties, payload)))
        return at

    def _content_frame(self, buffer: bytearray, kind: int, channel: int, start: int, stop: int,
                       events: list[Event]) -> bool:
        """A delivery's frames, read without pamqp (True: done): ``basic.deliver`` (its fields checked as
        pamqp would), a content header whose properties section came before (pamqp decoded those bytes:
        the same object again, read-only), a body. False: pamqp reads the frame (and refuses what is not
        0-9-1, a frame end that is not 0xce included)."""
        if buffer[stop] != _FRAME_END_BYTE:
            return False
        if kind == FRAME_BODY:
            self._body(channel, bytes(buffer[start:stop]), events)
            return True
        if kind == FRAME_METHOD and stop - start == 13 and (ids := buffer[start:start + 4]) in (_BASIC_ACK, _BASIC_NACK):
            tag, bits = _TAG_AND_BITS.unpack_from(buffer, start + 4)  # (a confirm: read as pamqp reads it)
            self._confirmed(channel, tag, bool(bits & 1), ids == _BASIC_ACK, events)
            return True
        if kind == FRAME_METHOD and buffer[start:start + 4] == _BASIC_DELIVER:
            state = self._state(channel)
            state.deliver, state.content = _deliver(buffer, start + 4, stop, self._deliver_names), None
            return True
        if kind == FRAME_HEADER and stop - start >= 14 and buffer[start:start + 2] == _BASIC_CLASS:
            properties = self._decoded_properties.get(bytes(buffer[start + 12:stop]))
            if properties is None:
                return False
            self._content_header(channel, properties, _BODY_SIZE.unpack_from(buffer, start + 4)[0], events)
            return True
        return False

    def _keep_properties(self, encoded: bytes, properties: Any) -> None:
        if len(self._decoded_properties) >= PUBLISH_FRAMES:
            self._decoded_properties.clear()
        self._decoded_properties[encoded] = properties

    def _state(self, channel: int) -> _Channel:
        state = self._channels.get(channel)
        if state is None:
            raise ProtocolError(f"a frame on channel {channel}, which is not open")
        return state

    def _content_header(self, channel: int, properties: Any, body_size: int, events: list[Event]) -> None:
        state = self._state(channel)
        state.content, state.size, state.parts = properties, body_size, []
        if not body_size:
            self._delivered(channel, state, events)

    def _body(self, channel: int, value: bytes, events: list[Event]) -> None:
        state = self._state(channel)
        if state.content is None:
            raise ProtocolError(f"a content body frame on channel {channel} without its content header")
        state.parts.append(value)
        state.size -= len(value)
        if state.size <= 0:
            self._delivered(channel, state, events)

    def _frame(self, channel: int, value: Any, events: list[Event]) -> None:
        if isinstance(value, header.ContentHeader):
            self._content_header(channel, value.properties, value.body_size, events)
        elif isinstance(value, body.ContentBody):
            self._body(channel, value.value, events)
        elif isinstance(value, commands.Basic.Deliver):
            state = self._state(channel)
            state.deliver = _Deliver(value.delivery_tag or 0, bool(value.redelivered), value.exchange,
                                     value.routing_key or "")
            state.content = None  # (a body before its content header is refused)
        elif isinstance(value, commands.Basic.Return):
            state = self._state(channel)
            state.deliver = state.content = None
        elif isinstance(value, commands.Basic.Ack | commands.Basic.Nack):
            self._confirmed(channel, value.delivery_tag, bool(value.multiple), isinstance(value, commands.Basic.Ack),
                            events)
        elif channel == 0:
            self._connection_method(value, events)
        else:
            self._channel_method(channel, value, events)

    def _delivered(self, channel: int, state: _Channel, events: list[Event]) -> None:
        deliver, state.deliver = state.deliver, None
        payload = state.parts[0] if len(state.parts) == 1 else b"".join(state.parts)
        content, state.content, state.parts = state.content, None, []
        if deliver is not None:  # (a basic.return's content is dropped: the bridge publishes without mandatory)
            events.append(Delivery(channel, deliver.delivery_tag, deliver.redelivered, deliver.exchange,
                                   deliver.routing_key, content, payload))

    def _confirmed(self, channel: int, tag: int, multiple: bool, ack: bool, events: list[Event]) -> None:
        state = self._state(channel)
        pending = state.unconfirmed
        if multiple:  # (every number up to the tag, of those published: never more than were published)
            last = min(tag, state.published)
            tokens = [token for number in range(state.confirmed_below, last + 1)
                      if (token := pending.pop(number, _NONE)) is not _NONE]
            state.confirmed_below = max(state.confirmed_below, last + 1)
        else:
            tokens = [pending.pop(tag)] if tag in pending else []
        if tokens:
            events.append(Confirmed(channel, tuple(tokens), ack))

    def _channel_method(self, channel: int, value: base.Frame, events: list[Event]) -> None:
        if isinstance(value, commands.Channel.Close):
            self._out.append(frame.marshal(commands.Channel.CloseOk(), channel))
            events.append(self._channel_closed(channel, value.reply_code or 0, value.reply_text))
        elif isinstance(value, commands.Basic.Cancel):  # its queue was deleted: the consumer is gone
            events.append(Closed(channel, 0, f"the broker cancelled consumer {value.consumer_tag}"))
        else:
            events.append(Reply(channel, value))

    def _channel_closed(self, channel: int, code: int, text: str) -> Closed:
        state = self._channels.pop(channel, None)
        return Closed(channel, code, text, tuple(state.unconfirmed.values()) if state is not None else ())

    def _connection_method(self, value: base.Frame, events: list[Event]) -> None:
        match value:
            case commands.Connection.Start():
                self._start_ok(value)
            case commands.Connection.Tune():
                self._tune(value)
            case commands.Connection.OpenOk():
                self.opened = True
                events.append(Reply(0, value))
            case commands.Connection.Close() | commands.Connection.CloseOk():
                if isinstance(value, commands.Connection.Close):
                    self._out.append(frame.marshal(commands.Connection.CloseOk(), 0))
                    code, text = value.reply_code or 0, value.reply_text
                else:
                    code, text = 200, "closed"
                self.closed = True
                unconfirmed = [t for n in list(self._channels) for t in self._channel_closed(n, code, text).unconfirmed]
                events.append(Closed(0, code, text, tuple(unconfirmed)))
            case _:
                events.append(Reply(0, value))

    def _start_ok(self, start: commands.Connection.Start) -> None:
        offered = start.mechanisms.split()
        if self.mechanism not in offered:
            raise ProtocolError(f"the broker offers SASL {offered}, not {self.mechanism}")
        user, password = self._credentials
        response = f"\0{user}\0{password}" if self.mechanism == "PLAIN" else ""
        properties: dict[str, Any] = {"product": self.product, "capabilities": CAPABILITIES}
        self._out.append(frame.marshal(commands.Connection.StartOk(
            client_properties=properties, mechanism=self.mechanism, response=response, locale="en_US"), 0))

    def _tune(self, tune: commands.Connection.Tune) -> None:
        self.frame_max = min(x for x in (tune.frame_max, self.frame_max) if x) if tune.frame_max else self.frame_max
        offered = tune.heartbeat
        self.heartbeat_s = min(offered, self.heartbeat_s) if offered and self.heartbeat_s else 0
        self._out.append(frame.marshal(commands.Connection.TuneOk(tune.channel_max or 2047, self.frame_max,
                                                                  self.heartbeat_s), 0))
        self._out.append(frame.marshal(commands.Connection.Open(self.vhost), 0))

