"""Traffic-light payloads <-> Basic Interface messages (sans-I/O): the bridge's C-Roads side.

Controller -> C-Roads (one BI message per payload, body = the payload bytes unchanged):

- Table 1: ``messageType`` from the payload type byte (:mod:`.payloads`), ``publisherId``,
  ``publicationId`` = ``<publisherId>:<TLC id>-<messageType>`` (one capability per controller and
  message type: a capability has one messageType), ``originatingCountry``, ``protocolVersion``,
  ``quadTree`` = the zoom-18 tile of the controller's configured position (IP_038; Table 8: the
  MAPEM refPoint, which the controller's position stands for), ``shardId`` when sharding is on
  (appendix G, IP_130);
- Tables 4/5: ``id`` = the controller's intersection ids ``,5-57,``; ``name`` when configured;
- IP_033: TTL = the message type's repetition interval x 1.2, at least 1 s;
- IP_104: a SPATEM is published only after the MAPEM of the same controller; earlier SPATEMs are
  dropped and counted (a SPATEM is stale 100 ms later; holding it would publish old signal state).

C-Roads -> controller: an SREM's ``id`` list names intersections; it goes, as a payload datagram,
to each controller that owns one of them.
"""
from __future__ import annotations

from dataclasses import dataclass

from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.config import BRIDGED_KINDS, ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.payloads import MESSAGE_IDS, kind_of
from quadtree.property import format_property, parse_property
from quadtree.tiles import from_latlon

PropertyValue = str | int | float
ZOOM = 18
#: Selector length the bridge stays under: the II's default max_selector_length is 2000.
SELECTOR_BUDGET = 1900


def publication_id(publisher_id: str, tlc_id: str, kind: str) -> str:
    return f"{publisher_id}:{tlc_id}-{kind}"


def ttl_ms(repetition_ms: int) -> int:
    """IP_033: repetition interval x 1.2, at least one second."""
    return max(1000, repetition_ms * 6 // 5)


@dataclass(frozen=True, slots=True)
class BiMessage:
    properties: dict[str, PropertyValue]
    ttl_ms: int
    body: bytes
    tlc: str
    kind: str


@dataclass(frozen=True, slots=True)
class Dropped:
    reason: str
    tlc: str | None


class Translator:
    """Both directions for one bridge config; keeps the IP_104 state (which MAPEMs went out)."""

    def __init__(self, config: TlexBridgeConfig) -> None:
        self.config = config
        self.controllers = {c.tlc_id: c for c in config.controllers}
        self._owner = {i: c.tlc_id for c in config.controllers for i in c.intersections}
        self._properties = {(c.tlc_id, kind): self._fixed_properties(c, kind)
                            for c in config.controllers for kind in BRIDGED_KINDS}
        self._ttl = {kind: ttl_ms(config.repetition_ms[kind]) for kind in BRIDGED_KINDS}
        self._mapem_published: set[str] = set()
        self.spatem_before_mapem = 0

    def _fixed_properties(self, controller: ControllerConfig, kind: str) -> dict[str, PropertyValue]:
        config = self.config
        props: dict[str, PropertyValue] = {
            "messageType": kind, "publisherId": config.publisher_id,
            "publicationId": publication_id(config.publisher_id, controller.tlc_id, kind),
            "originatingCountry": config.originating_country, "protocolVersion": config.protocol_versions[kind],
            "quadTree": format_property([tile(controller)]), "id": "," + ",".join(controller.intersections) + ",",
            "latitude": controller.latitude, "longitude": controller.longitude}
        if controller.names:
            props["name"] = "," + ",".join(controller.names) + ","
        if config.shard_count is not None and controller.shard_id is not None:
            props["shardId"] = controller.shard_id
            props["shardCount"] = config.shard_count
        return props

    def to_bi(self, payload: Payload) -> BiMessage | Dropped:
        """The BI message for a payload received from a controller, or why it is not published."""
        kind = kind_of(payload.payload_type)
        if kind not in BRIDGED_KINDS:
            return Dropped(f"payload type 0x{payload.payload_type:02x} is not SPATEM, MAPEM or SSEM", payload.tlc)
        if payload.tlc is None or payload.tlc not in self.controllers:
            return Dropped(f"TLC {payload.tlc!r} is not configured", payload.tlc)
        if kind == "MAPEM":
            self._mapem_published.add(payload.tlc)
        elif kind == "SPATEM" and payload.tlc not in self._mapem_published:
            self.spatem_before_mapem += 1
            return Dropped("SPATEM before the controller's first MAPEM (IP_104)", payload.tlc)
        return BiMessage(self._properties[(payload.tlc, kind)], self._ttl[kind], payload.payload, payload.tlc, kind)

    def restored_mapem(self, tlc: str, payload: bytes, age_ms: int) -> BiMessage:
        """A MAPEM stored before a restart (IP_049), published again: its TTL shortened by its age
        (at least 1 s), and the controller's SPATEMs may follow (IP_104)."""
        self._mapem_published.add(tlc)
        return BiMessage(self._properties[(tlc, "MAPEM")], max(1000, self._ttl["MAPEM"] - age_ms), payload, tlc, "MAPEM")

    def to_controllers(self, properties: dict, body: bytes, utc_ms: int) -> list[Payload] | Dropped:
        """Payload datagrams for an SREM from the broker: one per controller owning a listed intersection."""
        if properties.get("messageType") != "SREM":
            return Dropped(f"messageType {properties.get('messageType')!r} is not SREM", None)
        ids = properties.get("id")
        if not isinstance(ids, str):
            return Dropped("SREM without an id property (Table 5): no intersection to send it to", None)
        try:
            listed = parse_property(ids)
        except ValueError:
            listed = [i for i in ids.split(",") if i]
        owners = list(dict.fromkeys(self._owner[i] for i in listed if i in self._owner))
        if not owners:
            return Dropped(f"SREM for intersections {ids} that no bridged controller owns", None)
        return [Payload(MESSAGE_IDS["SREM"], utc_ms, body, tlc) for tlc in owners]

    def capabilities(self) -> list[dict]:
        """The actor API body: one capability per controller and bridged message type (Tables 10-12)."""
        caps = []
        for controller in self.config.controllers:
            for kind in BRIDGED_KINDS:
                props = self._properties[(controller.tlc_id, kind)]
                metadata: dict = {}
                if self.config.shard_count is not None:
                    metadata["shardCount"] = self.config.shard_count
                caps.append({"application": {
                    "messageType": kind, "publisherId": props["publisherId"], "publicationId": props["publicationId"],
                    "originatingCountry": props["originatingCountry"], "protocolVersion": props["protocolVersion"],
                    "quadTree": [tile(controller)]}, "metadata": metadata})
        return caps

    def srem_selectors(self, max_length: int = SELECTOR_BUDGET) -> list[str]:
        """Subscription selectors that together cover SREMs for every bridged intersection, each at
        most ``max_length`` characters (an interchange refuses longer ones as ILLEGAL, Table 14)."""
        head = "messageType = 'SREM' AND ("
        selectors: list[str] = []
        likes: list[str] = []
        for intersection in sorted(self._owner):
            like = f"id LIKE '%,{intersection},%'"
            if likes and len(head) + len(" OR ".join([*likes, like])) + 1 > max_length:
                selectors.append(head + " OR ".join(likes) + ")")
                likes = []
            likes.append(like)
        return selectors + [head + " OR ".join(likes) + ")"]


def tile(controller: ControllerConfig) -> str:
    return from_latlon(controller.latitude, controller.longitude, ZOOM)


__all__ = ["BiMessage", "Dropped", "Translator", "publication_id", "tile", "ttl_ms"]
