"""Traffic-light payloads <-> Basic Interface messages (sans-I/O): the bridge's C-Roads side.

- Table 1/4/5 properties per payload (body unchanged), built and checked with the actors' toolkit
  at start; ``publicationId`` = ``<publisherId>:<TLC id>-<messageType>``; IP_113 ``quadTree``;
- IP_033: TTL = the message type's repetition interval x 1.2, at least 1 s;
- IP_104: a SPATEM is published only after its controller's MAPEM (earlier ones dropped, counted);
- IP_048/049: the stored MAPEM is published again before a SPATEM once the last one is 9 min old;
- capabilities: one per controller and type; SREMs go to the controllers owning their ``id``.

A payload not published is :class:`Dropped` with a ``cause``. The mapping and the reasons:
docs/tlex-bridge.md ("Payloads -> Basic Interface messages").
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from interchange.bridges.tlex.codec import MAX_TLC_PAYLOAD, Payload
from interchange.bridges.tlex.config import BRIDGED_KINDS, MAPEM, SPATEM, SREM, ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.payloads import Identified, PayloadTypes, identify
from interchange.ground.profile import REFERENCE_ZOOM, TTL
from ii_api.wire.models import Capability
from interchange.actor import Circle, Tiles, area_tiles, area_zoom, build_capability, check_properties, message_properties
from quadtree.property import parse_property
from quadtree.tiles import from_latlon

PropertyValue = str | int | float
ZOOM = REFERENCE_ZOOM  #: IP_038: the controller's position stands for the MAPEM refPoint
#: Longest SREM subscription selector: under the II's default max_selector_length (2,000), as the
#: node asks its neighbours for the same subscriptions (IP_079) and their policy is theirs; less
#: when the node's own policy says so (:attr:`~.limits.ActorLimits.srem_selector_length`).
SELECTOR_BUDGET = 1900
#: How the bridge's SREM subscription selectors start (the bridge recognises its own by it).
SREM_SELECTOR_HEAD = f"messageType = '{SREM}' AND ("


def publication_id(publisher_id: str, tlc_id: str, kind: str) -> str:
    return f"{publisher_id}:{tlc_id}-{kind}"


def ttl_ms(repetition_ms: int) -> int:
    """IP_033: repetition interval x 1.2, at least one second."""
    return TTL.ttl_ms(repetition_ms)


@dataclass(frozen=True, slots=True)
class BiMessage:
    properties: dict[str, PropertyValue]
    ttl_ms: int
    body: bytes
    tlc: str
    kind: str
    made_ms: int = 0  #: when the payload came (UTC ms; 0: unknown), for its TTL while it waits


#: Why a payload is not published: its ``Dropped.cause``.
UNIDENTIFIED, NOT_BRIDGED, UNKNOWN_TLC, WAITS_FOR_MAPEM, MAPEM_SUPPRESSED, OVERSIZE = (
    "unidentified", "not_bridged", "unknown_tlc", "waits_for_mapem", "mapem_suppressed", "oversize")


@dataclass(frozen=True, slots=True)
class Dropped:
    reason: str
    tlc: str | None
    cause: str = "other"


@dataclass(slots=True)
class _PublishedMapem:
    body: bytes
    published_ms: int  #: when the last copy went to the broker (the repetition clock, IP_048)


@dataclass
class MapemRepetition:
    """IP_048/049 state: the last MAPEM published per controller, and what was repeated or skipped."""

    interval_ms: int  #: repeat at least this often while valid (IP_048: 9 min)
    min_interval_ms: int = 0  #: identical copies from the controller closer than this are not published
    last: dict[str, _PublishedMapem] = field(default_factory=dict)
    repeated: int = 0
    suppressed: int = 0

    def offered(self, tlc: str, body: bytes, now_ms: int) -> bool:
        """A MAPEM from the controller: True if it is to be published (and recorded as published)."""
        last = self.last.get(tlc)
        if last is not None and last.body == body and now_ms - last.published_ms < self.min_interval_ms:
            self.suppressed += 1
            return False
        self.last[tlc] = _PublishedMapem(body, now_ms)
        return True

    def due(self, tlc: str, now_ms: int) -> bytes | None:
        """Before a SPATEM of ``tlc``: the stored MAPEM if its last copy is ``interval_ms`` old."""
        last = self.last.get(tlc)
        if last is None or now_ms - last.published_ms < self.interval_ms:
            return None
        last.published_ms = now_ms
        self.repeated += 1
        return last.body


class Translator:
    """Both directions for one bridge config; keeps the IP_104 state (which MAPEMs went out)."""

    def __init__(self, config: TlexBridgeConfig) -> None:
        self.config = config
        self.controllers = {c.tlc_id: c for c in config.controllers}
        self._owner = {i: c.tlc_id for c in config.controllers for i in c.intersections}
        self._areas: dict[tuple[float, float, float], list[str]] = {}  #: computed once: thousands of controllers
        self._properties = {(c.tlc_id, kind): self._fixed_properties(c, kind)
                            for c in config.controllers for kind in BRIDGED_KINDS}
        self._ttl = {kind: ttl_ms(config.repetition_ms[kind]) for kind in BRIDGED_KINDS}
        shared: dict[PayloadTypes, PayloadTypes] = {}  # one object per distinct mapping, not per controller
        self.types = {c.tlc_id: shared.setdefault(types, types)
                      for c in config.controllers for types in (config.types_of(c),)}
        self._versions = frozenset(config.its_protocol_versions)
        #: (type byte, identification) of a payload whose header and type byte disagreed; the bridge
        #: reads and clears it after each payload (it logs the wrong mapping)
        self.mismatch: tuple[int, Identified] | None = None
        self.mapems = MapemRepetition(config.repetition_ms[MAPEM], config.mapem_min_interval_ms)
        self.spatem_before_mapem = 0

    def carrying_over(self, previous: "Translator") -> "Translator":
        """This translator with ``previous``'s IP_104/IP_048 state of the controllers both know
        (a controller moved or kept across a run-time change need not send its MAPEM again)."""
        self.mapems.last = {tlc: last for tlc, last in previous.mapems.last.items() if tlc in self.controllers}
        self.mapems.repeated, self.mapems.suppressed = previous.mapems.repeated, previous.mapems.suppressed
        self.spatem_before_mapem = previous.spatem_before_mapem
        return self

    def area(self, controller: ControllerConfig, kind: str) -> list[str]:
        """IP_113: the zoom-14 tiles covering the controller's destination area for ``kind``."""
        key = (controller.latitude, controller.longitude, self.config.radius_of(controller, kind))
        tiles = self._areas.get(key)
        if tiles is None:
            tiles = self._areas[key] = area_tiles(Circle(*key), area_zoom(kind))
        return tiles

    def _fixed_properties(self, controller: ControllerConfig, kind: str) -> dict[str, PropertyValue]:
        config = self.config
        extra: dict[str, PropertyValue] = {"id": "," + ",".join(controller.intersections) + ","}
        if controller.names:
            extra["name"] = "," + ",".join(controller.names) + ","
        sharded = config.shard_count is not None and controller.shard_id is not None
        props = message_properties(
            message_type=kind, publisher_id=config.publisher_id,
            publication_id=publication_id(config.publisher_id, controller.tlc_id, kind),
            protocol_version=config.protocol_versions[kind], originating_country=config.originating_country,
            position=(controller.latitude, controller.longitude), quad_tree=self.area(controller, kind),
            shard_id=controller.shard_id if sharded else None, shard_count=config.shard_count if sharded else None,
            extra=extra)
        problems = check_properties(props, capability_shard_count=config.shard_count)
        if problems:
            raise ValueError(f"controller {controller.tlc_id}: the broker would refuse its {kind}s: "
                             + "; ".join(str(problem) for problem in problems))
        return props

    def to_bi(self, payload: Payload, now_ms: int) -> list[BiMessage] | Dropped:
        """The BI messages for a payload received from a controller at ``now_ms`` (the payload, after
        a MAPEM repetition that is due, IP_048), or why nothing is published."""
        tlc = payload.tlc
        types = self.types.get(tlc) if tlc is not None else None
        if tlc is None or types is None:
            return Dropped(f"TLC {tlc!r} is not configured", tlc, UNKNOWN_TLC)
        found = identify(payload.payload_type, payload.payload, types, self.config.identify, self._versions)
        if not isinstance(found, Identified):
            return Dropped(found.reason, tlc, UNIDENTIFIED)
        if found.mapped is not None:
            self.mismatch = (payload.payload_type, found)
        kind = found.kind
        if kind not in BRIDGED_KINDS:
            return Dropped(f"a {kind} (by its {found.by}) is not bridged: SPATEM, MAPEM and SSEM are", tlc, NOT_BRIDGED)
        message = BiMessage(self._properties[(tlc, kind)], self._ttl[kind], payload.payload, tlc, kind, now_ms)
        if kind == MAPEM:
            if not self.mapems.offered(tlc, payload.payload, now_ms):
                return Dropped("identical MAPEM within mapem_min_interval_ms (IP_049)", tlc, MAPEM_SUPPRESSED)
        elif kind == SPATEM:
            if tlc not in self.mapems.last:
                self.spatem_before_mapem += 1
                return Dropped("SPATEM before the controller's first MAPEM (IP_104)", tlc, WAITS_FOR_MAPEM)
            repeat = self.mapems.due(tlc, now_ms)
            if repeat is not None:
                return [self._mapem(tlc, repeat, self._ttl[MAPEM], now_ms), message]
        return [message]

    def _mapem(self, tlc: str, body: bytes, ttl: int, made_ms: int) -> BiMessage:
        return BiMessage(self._properties[(tlc, MAPEM)], ttl, body, tlc, MAPEM, made_ms)

    def restored_mapem(self, tlc: str, payload: bytes, age_ms: int, now_ms: int) -> BiMessage:
        """A MAPEM stored before a restart (IP_049), published again: its TTL shortened by its age
        (at least 1 s), its repetition due when it would have been, and the controller's SPATEMs may
        follow (IP_104)."""
        self.mapems.last[tlc] = _PublishedMapem(payload, now_ms - age_ms)
        return self._mapem(tlc, payload, max(TTL.minimum_ms, self._ttl[MAPEM] - age_ms), now_ms)

    def mapem_refused(self, tlc: str, body: bytes) -> bool:
        """The broker refused this MAPEM for good: unless a newer one went out since, the
        controller's SPATEMs wait again for a MAPEM (IP_104). True if they do."""
        last = self.mapems.last.get(tlc)
        if last is None or last.body != body:
            return False
        del self.mapems.last[tlc]
        return True

    def to_controllers(self, properties: dict, body: bytes, utc_ms: int) -> list[Payload] | Dropped:
        """Payload datagrams for an SREM from the broker: one per controller owning a listed
        intersection, with that controller's SREM type byte."""
        if properties.get("messageType") != SREM:
            return Dropped(f"messageType {properties.get('messageType')!r} is not SREM", None)
        if len(body) > MAX_TLC_PAYLOAD:
            return Dropped(f"an SREM of {len(body)} bytes does not fit a TCPStreaming frame (a payload of at most "
                           f"{MAX_TLC_PAYLOAD} bytes, TLEX 6.3.2)", None, OVERSIZE)
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
        return [Payload(self.types[tlc].by_kind[SREM], utc_ms, body, tlc) for tlc in owners]

    def capabilities(self) -> list[Capability]:
        """One capability per controller and bridged message type (Tables 10-12), its quadTree the
        destination area's tiles (IP_113), built and checked by the actors' toolkit."""
        caps = []
        config = self.config
        for controller in config.controllers:
            for kind in BRIDGED_KINDS:
                props = self._properties[(controller.tlc_id, kind)]
                caps.append(build_capability(
                    message_type=kind, publisher_id=config.publisher_id, publication_id=str(props["publicationId"]),
                    protocol_version=config.protocol_versions[kind], originating_country=config.originating_country,
                    area=Tiles(tuple(self.area(controller, kind))), shard_count=config.shard_count))
        return caps

    def srem_selectors(self, max_length: int = SELECTOR_BUDGET) -> list[str]:
        """Subscription selectors that together cover SREMs for every bridged intersection (:func:`srem_selectors`)."""
        return srem_selectors(self._owner, max_length)


def srem_selectors(intersections: Iterable[str], max_length: int = SELECTOR_BUDGET) -> list[str]:
    """Subscription selectors that together cover SREMs for ``intersections``, each at most
    ``max_length`` characters (an interchange refuses longer ones as ILLEGAL, Table 14) unless one
    intersection alone needs more."""
    head, close, glue = SREM_SELECTOR_HEAD, ")", " OR "
    selectors: list[str] = []
    likes: list[str] = []
    length = len(head) + len(close)
    for intersection in sorted(intersections):
        like = f"id LIKE '%,{intersection},%'"
        added = len(like) + (len(glue) if likes else 0)
        if likes and length + added > max_length:
            selectors.append(head + glue.join(likes) + close)
            likes, length, added = [], len(head) + len(close), len(like)
        likes.append(like)
        length += added
    return selectors + [head + glue.join(likes) + close]


def tile(controller: ControllerConfig) -> str:
    return from_latlon(controller.latitude, controller.longitude, ZOOM)


__all__ = ["MAPEM_SUPPRESSED", "NOT_BRIDGED", "OVERSIZE", "SREM_SELECTOR_HEAD", "UNIDENTIFIED", "UNKNOWN_TLC", "WAITS_FOR_MAPEM",
           "BiMessage", "Dropped", "MapemRepetition", "Translator", "publication_id",
           "srem_selectors", "tile", "ttl_ms"]
