"""The broker's in-memory form of a routed message."""
from __future__ import annotations


class BrokerMessage:
    """One received message, kept as the exact bytes received (IP_014/015).

    ``raw`` is ``bytes``, or for a large message the ``bytearray`` proton filled (no copy).

    ``properties`` are the decoded application properties (read for routing only, IP_008);
    ``expiry_ms`` is the absolute expiry in ms since the epoch (IP_033) or None;
    ``shard_key`` orders delivery per (publicationId, shardId) (IP_128, no shardId = shard 1).

    Set by :class:`~interchange.broker.admission.Admission` for the log's audit trail
    (:mod:`interchange.ground.logformat`): ``seq``, the process's message number (0 until admitted);
    ``shard_seq``, the message's number within its shard (IP_128-130); ``expiry_source``, what
    set ``expiry_ms``. ``redeliveries`` counts, per source address, how often a consumer gave the
    message back (None until one did): the next delivery there is attempt ``count + 1``.

    A durable message (:mod:`interchange.broker.durable`) has ``holders``, the source
    addresses that still hold it (buffered or sent and not settled), and ``store_id``, its id in
    the process's store (0 until stored); both are None/0 for a memory-only message.
    """

    __slots__ = ("raw", "properties", "expiry_ms", "federated", "publisher", "shard_key", "arrival_ms", "size",
                 "seq", "shard_seq", "expiry_source", "redeliveries",
                 "holders", "store_id")

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
        self.properties = properties
        self.expiry_ms = expiry_ms
        self.federated = federated
        self.publisher = publisher
        self.arrival_ms = arrival_ms
        self.size = len(raw)
        shard = properties.get("shardId")
        self.shard_key = (properties.get("publicationId"), shard if isinstance(shard, int) else 1)
        self.seq = 0
        self.shard_seq = 0
        self.expiry_source = "default"
        self.redeliveries: dict[str, int] | None = None
        self.holders: set[str] | None = None
        self.store_id = 0
