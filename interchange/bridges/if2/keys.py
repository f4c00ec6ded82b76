"""IF2 routing keys and message properties <-> C-Roads application properties (sans-I/O).

IF2 (hybrid specification v1.0, 6.4): ``<type>.<version>.<provider>.<subtype>.<18 quadtree
digits>``, Table 4's ``ttl`` (AMQP ``expiration``) and ``lat``/``lon``; C-Roads: the profile's
Table 1/2 (IP_022/026; ``quadTree`` IP_037/038). Where IF2 is silent: DENM ``subCauseCode`` 0
(-1 for a cancellation); a non-DENM subtype in ``custom-intercor-if2-subtype`` (IP_131);
``publicationId`` ``<publisherId>:if2-<TYPE>-<version>`` (:func:`publication_id`); ``quadTree`` =
the key's zoom-18 tile and the tiles of the type's area zoom (IP_112: 13, IP_113: 14) within
``area_radius_m``; ``lat``/``lon`` outside the key's tile are refused. Properties are checked with
the broker's rules (:func:`interchange.actor.properties.check_properties`). The key layout, the
property table and each choice: docs/if2-bridge.md ("Routing keys <-> C-Roads properties").
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import quadtree
from quadtree.cover import central_angle
from interchange.actor.areas import Circle, area_tiles, area_zoom
from interchange.actor.errors import ActorError
from interchange.actor.properties import check_properties
from interchange.broker.validation import check_property_value
from interchange.ground.profile import CANCELLATION, MessageType

__all__ = ["CROADS_TO_IF2", "AreaCover", "IF2_TO_CROADS", "If2Envelope", "If2KeyError", "ProviderTable", "RoutingKey",
           "ROUTING_ZOOM", "SUBTYPE_PROPERTY", "croads_properties", "if2_envelope", "publication_id",
           "envelope_of", "table4_headers", "ttl_of", "version_word"]

#: IF2 exchange (= message type) -> C-Roads messageType (IF2 chapter 6.2; IP Table 1).
IF2_TO_CROADS: Mapping[str, str] = {"DENM": MessageType.DENM.value, "IVI": MessageType.IVIM.value,
                                    "MAP": MessageType.MAPEM.value, "SPAT": MessageType.SPATEM.value}
CROADS_TO_IF2: Mapping[str, str] = {v: k for k, v in IF2_TO_CROADS.items()}
#: IF2 6.4: "The zoom level to use is 18".
ROUTING_ZOOM = 18
#: Where a non-DENM IF2 subtype is kept on the C-Roads side (IP_131 name spacing).
SUBTYPE_PROPERTY = "custom-intercor-if2-subtype"
DEFAULT_SUBTYPE = "0"
#: The AMQP 0-9-1 routing key is a short string (at most 255 bytes).
MAX_KEY_BYTES = 255
HEADER_WORDS = 4  #: type, version, provider, subtype
KEY_WORDS = HEADER_WORDS + ROUTING_ZOOM

_WORD = re.compile(r"[A-Za-z0-9_-]+")
_VERSION_WORD = re.compile(r"[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*")
_DOTTED_VERSION = re.compile(r"[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*")


class If2KeyError(ValueError):
    """A routing key, binding key, property set or provider table that cannot be mapped; the
    message says which part and why."""


def _word(what: str, text: str) -> str:
    if not _WORD.fullmatch(text):
        raise If2KeyError(f"{what} {text!r} is not one routing-key word (letters, digits, '_' or '-'; "
                          "IF2 6.4: no '.' inside a word)")
    return text


def version_word(dotted: str) -> str:
    """``1.2.1`` -> ``1_2_1`` (IF2 6.4)."""
    if not _DOTTED_VERSION.fullmatch(dotted):
        raise If2KeyError(f"version {dotted!r} is not like '1.2.1' (letters and digits separated by '.')")
    return dotted.replace(".", "_")


def dotted_version(word: str) -> str:
    """``1_2_1`` -> ``1.2.1``."""
    if not _VERSION_WORD.fullmatch(word):
        raise If2KeyError(f"version word {word!r} is not like '1_2_1' (letters and digits separated by '_')")
    return word.replace("_", ".")


def check_subtype(message_type: str, subtype: str) -> str:
    """The subtype word; for DENM it is the causeCode (Table 2: 0-255, -1 for a cancellation)."""
    _word("subtype", subtype)
    if message_type == "DENM":
        problem = (check_property_value("causeCode", int(subtype)) if re.fullmatch(r"-?[0-9]{1,3}", subtype)
                   else "not an integer")
        if problem is not None:
            raise If2KeyError(f"DENM subtype {subtype!r} is not a causeCode: {problem}")
    return subtype


@dataclass(frozen=True)
class RoutingKey:
    """One IF2 routing key; ``version`` dotted (``1.2.1``), ``tile`` the 18 quadtree digits."""

    message_type: str
    version: str
    provider: str
    subtype: str
    tile: str
    #: the key as published (written once: a key is published with every message of its mapping)
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.message_type not in IF2_TO_CROADS:
            raise If2KeyError(f"message type {self.message_type!r} is not an IF2 type "
                              f"({', '.join(IF2_TO_CROADS)})")
        word = version_word(self.version)
        _word("provider", self.provider)
        check_subtype(self.message_type, self.subtype)
        if len(self.tile) != ROUTING_ZOOM or set(self.tile) - set("0123"):
            raise If2KeyError(f"quadtree path {self.tile!r} is not {ROUTING_ZOOM} digits 0-3 (IF2 6.4: zoom 18)")
        object.__setattr__(self, "text", ".".join([self.message_type, word, self.provider, self.subtype, *self.tile]))

    @classmethod
    def parse(cls, text: str) -> "RoutingKey":
        if not isinstance(text, str) or not text:
            raise If2KeyError("empty routing key")
        if len(text.encode()) > MAX_KEY_BYTES:
            raise If2KeyError(f"routing key longer than {MAX_KEY_BYTES} bytes")
        words = text.split(".")
        if len(words) != KEY_WORDS:
            raise If2KeyError(f"routing key {text!r} has {len(words)} words, not {KEY_WORDS}: "
                              "<type>.<version>.<provider>.<subtype> and 18 quadtree digits (IF2 6.4)")
        tile_words = words[HEADER_WORDS:]
        for position, digit in enumerate(tile_words, start=HEADER_WORDS + 1):
            if digit not in ("0", "1", "2", "3"):
                raise If2KeyError(f"routing key {text!r}: word {position} ({digit!r}) is not a quadtree digit 0-3")
        return cls(words[0], dotted_version(words[1]), words[2], words[3], "".join(tile_words))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ProviderTable:
    """IF2 provider names <-> C-Roads publisherIds (IP_031, the profile's publisherId rule),
    one-to-one."""

    publisher_ids: Mapping[str, str]

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for provider, publisher in self.publisher_ids.items():
            _word("provider", provider)
            problem = check_property_value("publisherId", publisher) if isinstance(publisher, str) else "not a string"
            if problem is not None:
                raise If2KeyError(f"provider {provider!r}: publisherId {publisher!r} is not a C-Roads publisherId: "
                                  f"{problem}")
            if publisher in seen:
                raise If2KeyError(f"publisherId {publisher!r} is given to both {seen[publisher]!r} and {provider!r}")
            seen[publisher] = provider

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> "ProviderTable":
        table: dict[str, str] = {}
        for provider, publisher in pairs:
            if provider in table:
                raise If2KeyError(f"provider {provider!r} appears twice")
            table[provider] = publisher
        return cls(table)

    def publisher_id(self, provider: str) -> str:
        try:
            return self.publisher_ids[provider]
        except KeyError:
            raise If2KeyError(f"provider {provider!r} is not in the provider table") from None

    def provider(self, publisher_id: str) -> str:
        for provider, publisher in self.publisher_ids.items():
            if publisher == publisher_id:
                return provider
        raise If2KeyError(f"publisherId {publisher_id!r} is not in the provider table")


def publication_id(publisher_id: str, message_type: str, version: str) -> str:
    """The publicationId of what a provider publishes of one IF2 type and version."""
    return f"{publisher_id}:if2-{message_type}-{version_word(version)}"


@dataclass(frozen=True)
class If2Envelope:
    """What travels beside an IF2 body: the routing key and Table 4's properties."""

    key: RoutingKey
    ttl_ms: int | None = None
    lat: float | None = None
    lon: float | None = None


def _number(what: str, value: object) -> float:
    """A number of any AMQP 0-9-1 header type: integer, float, double or decimal."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)) or not math.isfinite(value):
        raise If2KeyError(f"{what} {value!r} is not a finite number")
    return float(value)


def check_position(lat: object, lon: object, tile: str) -> tuple[float, float]:
    """lat/lon as floats, which must lie in ``tile`` (IF2 Table 4: consistent with the key)."""
    latitude, longitude = _number("lat", lat), _number("lon", lon)
    try:
        found = quadtree.from_latlon(latitude, longitude, ROUTING_ZOOM)
    except ValueError as exc:
        raise If2KeyError(f"lat/lon {latitude}, {longitude}: {exc}") from None
    if found != tile[:ROUTING_ZOOM]:
        raise If2KeyError(f"lat/lon {latitude}, {longitude} lie in tile {found}, not in the routing key's "
                          f"{tile[:ROUTING_ZOOM]}")
    return latitude, longitude


def area_property(tile: str, message_type: str, radius_m: float) -> str:
    """``quadTree`` of a message in the zoom-18 ``tile``: the tile, then the area tiles (IP_112/113) holding
    every point within ``radius_m`` of any point of the tile (a circle around its centre, wider by the
    distance to its corners), so the same for every message of the tile wherever its lat/lon lie in it.
    Radius 0 is the tile alone; an area tile the reference tile lies in is left out (it adds nothing)."""
    if not radius_m >= 0.0:
        raise If2KeyError(f"area radius {radius_m} m: must be 0 or more")
    if radius_m == 0.0:
        return quadtree.format_property([tile])
    south, west, north, east = quadtree.bounds(tile)
    lat, lon = (south + north) / 2, (west + east) / 2
    corner_m = max(quadtree.EARTH_RADIUS_M * central_angle(*map(math.radians, (lat, lon, corner_lat, corner_lon)))
                   for corner_lat in (south, north) for corner_lon in (west, east))
    try:
        area = area_tiles(Circle(lat, lon, radius_m + corner_m), area_zoom(message_type))
    except ActorError as exc:
        raise If2KeyError(str(exc)) from None
    return quadtree.format_property([tile, *(t for t in area if not tile.startswith(t))])


class AreaCover:
    """:func:`area_property` remembered by tile, message type and radius (at most ``limit``, the
    oldest forgotten): a cover costs about half a millisecond, and an IF2 source repeats its tiles."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._known: dict[tuple[str, str, float], str] = {}

    def property(self, tile: str, message_type: str, radius_m: float) -> str:
        key = (tile, message_type, radius_m)
        found = self._known.get(key)
        if found is None:
            found = area_property(tile, message_type, radius_m)
            if len(self._known) >= self.limit:
                del self._known[next(iter(self._known))]
            self._known[key] = found
        return found


def croads_properties(envelope: If2Envelope, providers: ProviderTable, area_radius_m: float = 0.0,
                      areas: AreaCover | None = None) -> dict[str, Any]:
    """The C-Roads application properties (IP Tables 1/2) of an IF2 message, its area ``area_radius_m``
    around it (IP_112/113, through ``areas`` when given), checked as the broker checks them (If2KeyError
    says what is wrong)."""
    key = envelope.key
    croads_type = IF2_TO_CROADS[key.message_type]
    publisher = providers.publisher_id(key.provider)
    props: dict[str, Any] = {
        "messageType": croads_type,
        "protocolVersion": f"{croads_type}:{key.version}",
        "publisherId": publisher,
        "publicationId": publication_id(publisher, key.message_type, key.version),
        "originatingCountry": publisher[:2],
        "quadTree": f",{key.tile},",
    }
    if key.message_type == "DENM":
        cause = int(key.subtype)
        props["causeCode"] = cause
        props["subCauseCode"] = CANCELLATION if cause == CANCELLATION else 0
    else:
        props[SUBTYPE_PROPERTY] = key.subtype
    if (envelope.lat is None) != (envelope.lon is None):
        raise If2KeyError("lat and lon come together (IF2 Table 4)")
    if envelope.lat is not None:
        props["latitude"], props["longitude"] = check_position(envelope.lat, envelope.lon, key.tile)
    props["quadTree"] = (areas.property(key.tile, croads_type, area_radius_m) if areas is not None
                         else area_property(key.tile, croads_type, area_radius_m))
    if problems := check_properties(props):
        raise If2KeyError("the node would refuse it: " + "; ".join(str(p) for p in problems))
    return props


def _version_from(croads_type: str, protocol_version: object) -> str:
    prefix = f"{croads_type}:"
    if not isinstance(protocol_version, str) or not protocol_version.startswith(prefix):
        raise If2KeyError(f"protocolVersion {protocol_version!r} is not '{prefix}<version>'")
    version = protocol_version[len(prefix):]
    version_word(version)
    return version


def _subtype_from(if2_type: str, properties: Mapping[str, Any]) -> str:
    if if2_type == "DENM":
        cause = properties.get("causeCode")
        if isinstance(cause, bool) or not isinstance(cause, int):
            raise If2KeyError(f"DENM causeCode {cause!r} is not an integer")
        problem = check_property_value("causeCode", cause)
        if problem is not None:
            raise If2KeyError(f"DENM causeCode {cause!r}: {problem}")
        return str(cause)
    subtype = properties.get(SUBTYPE_PROPERTY, DEFAULT_SUBTYPE)
    if not isinstance(subtype, str):
        raise If2KeyError(f"{SUBTYPE_PROPERTY} {subtype!r} is not a string")
    return check_subtype(if2_type, subtype)


def _location_from(properties: Mapping[str, Any]) -> tuple[str, float, float]:
    """(zoom-18 tile, lat, lon): the message's point if it has one, else its first tile's centre."""
    lat, lon = properties.get("latitude"), properties.get("longitude")
    if lat is not None and lon is not None:
        latitude, longitude = _number("latitude", lat), _number("longitude", lon)
        try:
            return quadtree.from_latlon(latitude, longitude, ROUTING_ZOOM), latitude, longitude
        except ValueError as exc:
            raise If2KeyError(f"latitude/longitude {latitude}, {longitude}: {exc}") from None
    try:
        tiles = quadtree.parse_property(properties.get("quadTree"))
    except ValueError as exc:
        raise If2KeyError(f"quadTree: {exc}") from None
    deep = [t for t in tiles if len(t) >= ROUTING_ZOOM]
    if not deep:
        raise If2KeyError(f"quadTree {properties.get('quadTree')!r} has no tile of zoom {ROUTING_ZOOM} or more")
    tile = deep[0][:ROUTING_ZOOM]
    south, west, north, east = quadtree.bounds(tile)
    return tile, (south + north) / 2, (west + east) / 2


def if2_envelope(properties: Mapping[str, Any], providers: ProviderTable, ttl_ms: int | None = None) -> If2Envelope:
    """The IF2 routing key and Table 4 properties of a C-Roads message."""
    croads_type = properties.get("messageType")
    if not isinstance(croads_type, str) or croads_type not in CROADS_TO_IF2:
        raise If2KeyError(f"messageType {croads_type!r} has no IF2 exchange (IF2 v1 carries "
                          f"{', '.join(CROADS_TO_IF2)})")
    if2_type = CROADS_TO_IF2[croads_type]
    version = _version_from(croads_type, properties.get("protocolVersion"))
    publisher = properties.get("publisherId")
    if not isinstance(publisher, str):
        raise If2KeyError(f"publisherId {publisher!r} is not a string")
    tile, lat, lon = _location_from(properties)
    key = RoutingKey(if2_type, version, providers.provider(publisher), _subtype_from(if2_type, properties), tile)
    if ttl_ms is not None and (isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 0):
        raise If2KeyError(f"ttl {ttl_ms!r} is not a non-negative number of milliseconds")
    return If2Envelope(key, ttl_ms, lat, lon)


def ttl_of(expiration_ms: int | None, headers: Mapping[str, Any]) -> int | None:
    """The ttl of a message consumed from IF2: its ``expiration`` (as the spec's example sends it), else
    a ``ttl`` header (Table 4); If2KeyError when it is not a number of milliseconds."""
    ttl = expiration_ms if expiration_ms is not None else headers.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0):
        raise If2KeyError(f"ttl {ttl!r} is not a non-negative number of milliseconds")
    return ttl


def envelope_of(routing_key: str, expiration_ms: int | None, headers: Mapping[str, Any] | None) -> If2Envelope:
    """The envelope of a message consumed from IF2: its routing key, ``expiration`` (the ttl, as the
    spec's example sends it; a ``ttl`` header otherwise) and ``lat``/``lon`` headers (Table 4)."""
    key = RoutingKey.parse(routing_key)
    headers = headers or {}
    ttl = ttl_of(expiration_ms, headers)
    lat, lon = headers.get("lat"), headers.get("lon")
    if (lat is None) != (lon is None):
        raise If2KeyError("lat and lon come together (IF2 Table 4)")
    if lat is not None:
        lat, lon = _number("lat", lat), _number("lon", lon)
    return If2Envelope(key, ttl, lat, lon)


def table4_headers(envelope: If2Envelope) -> dict[str, Any]:
    """The ``lat``/``lon`` (and ``ttl``) headers of a message published to IF2 (Table 4)."""
    headers: dict[str, Any] = {}
    if envelope.lat is not None and envelope.lon is not None:
        headers["lat"], headers["lon"] = envelope.lat, envelope.lon
    if envelope.ttl_ms is not None:
        headers["ttl"] = envelope.ttl_ms
    return headers
