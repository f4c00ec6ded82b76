"""The broker's in-memory form of a routed message, and what a buffered one costs.

A buffered message is kept as the exact bytes received (IP_014/015) and a little bookkeeping; its
decoded application properties (a dict several times the size of the bytes they came from) are
not kept while it waits in a buffer and are decoded again from those bytes when a selector or the
log reads them: memory follows the encoded size, which the limits count
(:mod:`interchange.broker.memory`).

Nearly every buffered message (admitted, memory-only, never given back) waits in its *compact*
form (:data:`Compact`, :meth:`BrokerMessage.compact`): a 4-tuple of its bytes, its shard's key
object, its publisher and one int packing its numbers (expiry, arrival, per-shard and process
numbers, flags), restored to a :class:`BrokerMessage` when it leaves the buffer
(:meth:`BrokerMessage.restore`). The others (durable ones, whose ``holders`` are shared with the
store and other sources; ones given back, with their ``redeliveries``; ones built by hand) wait
as objects, their properties dropped (:meth:`BrokerMessage.shed`).
"""
from __future__ import annotations

import os
from collections.abc import Callable

from interchange.broker.amqp_scan import decode_application_properties, scan_message

#: interchange.broker._admit.admit, or None when the module is not built (see admission.py)
_c_admit: Callable[[bytes | bytearray, int | None], tuple[dict[str, object], bool, int | None, int | None] | None] | None
try:
    from interchange.broker._admit import admit as _c_admit
except ImportError:
    _c_admit = None
if os.environ.get("INTERCHANGE_PURE_PYTHON") == "1":
    _c_admit = None


def decode_properties(raw: bytes | bytearray) -> dict[str, object]:
    """The application properties of an admitted message's bytes (the C accelerator's decoder when
    built: about a microsecond for a DENM; the Python scanner otherwise; both give the same dict)."""
    if _c_admit is not None:
        result = _c_admit(raw, None)
        if result is not None:
            return result[0]
    scanned = scan_message(raw, decode_properties=False)
    start, end = scanned.application_properties_offset, scanned.application_properties_end
    if start is None or end is None:
        return {}
    return decode_application_properties(raw, start, end)[0]


#: A buffered message in its compact form: (raw bytes, shard key, publisher, packed numbers).
Compact = tuple[bytes, tuple, str, int]

# The packed int of a compact message, from bit 0: expiry_ms + 1 (0: none), arrival_ms, shard_seq,
# the flags (federated, expiry_source's code), then seq (unbounded). Expiry comes first: the
# buffer reads it most (``packed & EXPIRY_MASK``). 45 bits of ms last until the year 3084.
_TIME_BITS = 45
EXPIRY_MASK = (1 << _TIME_BITS) - 1
_ARRIVAL_SHIFT = _TIME_BITS
_SHARD_SEQ_SHIFT = 2 * _TIME_BITS
_SHARD_SEQ_BITS = 40
_SHARD_SEQ_MASK = (1 << _SHARD_SEQ_BITS) - 1
_FLAGS_SHIFT = _SHARD_SEQ_SHIFT + _SHARD_SEQ_BITS
_SEQ_SHIFT = _FLAGS_SHIFT + 3
_EXPIRY_SOURCES = ("default", "ttl", "absolute-expiry-time")
_EXPIRY_CODES = {name: code for code, name in enumerate(_EXPIRY_SOURCES)}


def compact_expiry(packed: int) -> int | None:
    """The expiry (ms since the epoch) of a compact message's packed numbers, or None."""
    expiry = packed & EXPIRY_MASK
    return expiry - 1 if expiry else None


class BrokerMessage:
    """One received message, kept as the exact bytes received (IP_014/015).

    ``raw`` is ``bytes``, or for a large message the ``bytearray`` proton filled (no copy).

    ``properties`` are the decoded application properties (read for routing only, IP_008), decoded
    again from ``raw`` after :meth:`shed` dropped them (a buffered message);
    ``expiry_ms`` is the absolute expiry in ms since the epoch (IP_033) or None;
    ``shard_key`` orders delivery per (publicationId, shardId) (IP_128, no shardId = shard 1); the
    admission gives the messages of one shard the same key object.

    Set by :class:`~interchange.broker.admission.Admission` for the log's audit trail
    (:mod:`interchange.ground.logformat`): ``seq``, the process's message number (0 until admitted);
    ``shard_seq``, the message's number within its shard (IP_128-130); ``expiry_source``, what
    set ``expiry_ms``. ``redeliveries`` counts, per source address, how often a consumer gave the
    message back (None until one did): the next delivery there is attempt ``count + 1``.

    A durable message (:mod:`interchange.broker.durable`) has ``holders``, the source
    addresses that still hold it (buffered or sent and not settled), and ``store_id``, its id in
    the process's store (0 until stored); both are None/0 for a memory-only message.
    """

    __slots__ = ("raw", "_properties", "expiry_ms", "federated", "publisher", "shard_key", "arrival_ms",
                 "seq", "shard_seq", "expiry_source", "redeliveries", "holders", "store_id")

    def __init__(
        self,
        raw: bytes | bytearray,
        properties: dict,
        expiry_ms: int | None,
        federated: bool,
        publisher: str,
        arrival_ms: int,
    ) -> None:
        self.raw = raw
        self._properties: dict | None = properties
        self.expiry_ms = expiry_ms
        self.federated = federated
        self.publisher = publisher
        self.arrival_ms = arrival_ms
        shard = properties.get("shardId")
        self.shard_key = (properties.get("publicationId"), shard if isinstance(shard, int) else 1)
        self.seq = 0
        self.shard_seq = 0
        self.expiry_source = "default"
        self.redeliveries: dict[str, int] | None = None
        self.holders: set[str] | None = None
        self.store_id = 0

    @property
    def size(self) -> int:
        """The encoded size in bytes."""
        return len(self.raw)

    @property
    def properties(self) -> dict:
        """The application properties (decoded from ``raw`` again if :meth:`shed` dropped them; not
        kept: the message stays as small as it was)."""
        properties = self._properties
        return properties if properties is not None else decode_properties(self.raw)

    def compact(self) -> Compact | None:
        """This message's compact form for a buffer, or None if it must wait as an object: it has
        state of its own (durable: ``holders`` shared with the store and other sources; given back:
        ``redeliveries``), was built by hand (``seq`` 0: its properties are its own), is large
        (``raw`` a bytearray: the bookkeeping is small beside it) or a number is out of range."""
        raw = self.raw
        seq = self.seq
        if (not seq or self.holders is not None or self.redeliveries is not None or self.store_id
                or raw.__class__ is not bytes):
            return None
        expiry = self.expiry_ms
        expiry = 0 if expiry is None else expiry + 1
        arrival, shard_seq = self.arrival_ms, self.shard_seq
        code = _EXPIRY_CODES.get(self.expiry_source)
        # a negative number shifts to -1, a too large one to more than 0: either does not fit
        if code is None or (expiry | arrival) >> _TIME_BITS or shard_seq >> _SHARD_SEQ_BITS or seq < 0:
            return None
        packed = (expiry | arrival << _ARRIVAL_SHIFT | shard_seq << _SHARD_SEQ_SHIFT
                  | (code << 1 | self.federated) << _FLAGS_SHIFT | seq << _SEQ_SHIFT)
        return raw, self.shard_key, self.publisher, packed

    @classmethod
    def restore(cls, entry: Compact) -> BrokerMessage:
        """The message a compact form was made from (its properties decoded again when read)."""
        raw, shard_key, publisher, packed = entry
        message = cls.__new__(cls)
        message.raw = raw
        message._properties = None  # noqa: SLF001 (its own class)
        message.shard_key = shard_key
        message.publisher = publisher
        expiry = packed & EXPIRY_MASK
        message.expiry_ms = expiry - 1 if expiry else None
        message.arrival_ms = packed >> _ARRIVAL_SHIFT & EXPIRY_MASK
        message.shard_seq = packed >> _SHARD_SEQ_SHIFT & _SHARD_SEQ_MASK
        flags = packed >> _FLAGS_SHIFT & 7
        message.federated = bool(flags & 1)
        message.expiry_source = _EXPIRY_SOURCES[flags >> 1]
        message.seq = packed >> _SEQ_SHIFT
        message.redeliveries = None
        message.holders = None
        message.store_id = 0
        return message

    def shed(self) -> None:
        """Drop the decoded properties while the message waits in a buffer. Only an admitted
        message (``seq`` given) is known to decode again from ``raw`` to the same properties; one
        built by hand keeps its own."""
        if self.seq:
            self._properties = None
