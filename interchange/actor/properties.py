"""A message to publish: application properties of tables 1-7 from typed arguments, checked with the
node's own rules, its TTL (IP_033) and its AMQP encoding.

:func:`message_properties` (``quadTree`` IP_038/112/113, publicationId IP_022);
:func:`check_properties`: the broker's own validation, so what it reports is what the node would
refuse; :func:`message_ttl_ms` (IP_033: repetition interval x 1.2, at least 1 s, or the actor's
repetition interval x 1.2); :func:`check_repetition` (IP_048: at least every 9 min for DENM, IVIM,
MAPEM and POIM-PA; IP_124: CAM 1-120 s). Messages are durable by default. docs/actors.md ("The
library").
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proton import Message

import quadtree
from interchange.actor.areas import Area, area_tiles, area_zoom, reference_tile
from interchange.actor.errors import ActorError
from interchange.broker.ttl_policy import default_ttl_ms
from interchange.broker.validation import Problem, validate_application_properties
from interchange.ground.profile import MESSAGE_TYPES, TTL, Level, MessageType, PublisherId

__all__ = ["OutgoingMessage", "check_properties", "check_repetition", "message_properties", "message_ttl_ms",
           "publication_id_of"]

_PUBLISHER_ID = PublisherId()


def publication_id_of(publisher_id: str, publication_id: str) -> str:
    """IP_022: ``<publisherId>:<id>``; a bare id gets the publisherId in front."""
    return publication_id if ":" in publication_id else f"{publisher_id}:{publication_id}"


def message_properties(*, message_type: str, publisher_id: str, publication_id: str | None = None,
                       protocol_version: str | None = None, originating_country: str | None = None,
                       position: tuple[float, float] | None = None, area: Area | None = None,
                       quad_tree: list[str] | None = None, shard_id: int | None = None,
                       shard_count: int | None = None, cause_code: int | None = None,
                       sub_cause_code: int | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Application properties of tables 1-7 (not checked: :func:`check_properties` does that).

    ``quadTree`` lists the reference tile of ``position`` (zoom 18, IP_038), then the tiles of
    ``area`` at the message type's area zoom (IP_112/113), then ``quad_tree`` as given; latitude
    and longitude are set from ``position``. ``extra`` adds or replaces any property (tables 1-7
    names, or ``custom-<namespace>-<name>``, IP_131)."""
    props: dict[str, Any] = {"messageType": message_type, "publisherId": publisher_id}
    country = originating_country or (publisher_id[:_PUBLISHER_ID.letters] if len(publisher_id) > 2 else None)
    if country:
        props["originatingCountry"] = country
    if protocol_version is not None:
        props["protocolVersion"] = protocol_version
    if publication_id is not None:
        props["publicationId"] = publication_id_of(publisher_id, publication_id)
    tiles: list[str] = []
    if position is not None:
        lat, lon = position
        props["latitude"], props["longitude"] = float(lat), float(lon)
        tiles.append(reference_tile(lat, lon))
    if area is not None:
        tiles += area_tiles(area, area_zoom(message_type))
    tiles += quad_tree or []
    if tiles:
        props["quadTree"] = quadtree.format_property(list(dict.fromkeys(tiles)))
    optional = {"shardId": shard_id, "shardCount": shard_count, "causeCode": cause_code,
                "subCauseCode": sub_cause_code}
    props.update({name: value for name, value in optional.items() if value is not None})
    props.update(extra or {})
    return props


def check_properties(props: Mapping[str, Any], *, capability_shard_count: int | None = None) -> list[Problem]:
    """Every way ``props`` breaks tables 1-7: the broker's validation, so the node's verdict."""
    return validate_application_properties(props, capability_shard_count=capability_shard_count)


def _refused(problems: list[Problem]) -> ActorError:
    return ActorError("the node would refuse these properties: " + "; ".join(str(p) for p in problems),
                      "fix them, or see docs/actors.md for tables 1-7")


def check_repetition(message_type: str, every_ms: int) -> None:
    """A repetition interval within the profile's bounds for ``message_type`` (a "shall" only)."""
    try:
        repetition = MESSAGE_TYPES[MessageType(message_type)].repetition
    except ValueError:
        return  # an unknown type is refused by the properties' check
    if repetition.level is not Level.SHALL:
        return
    if repetition.at_most_ms is not None and every_ms > repetition.at_most_ms:
        raise ActorError(f"a {message_type} repeated every {every_ms / 1000:g} s: {repetition.requirement} asks for "
                         f"at least every {repetition.at_most_ms / 1000:g} s", "repeat more often")
    if repetition.at_least_ms is not None and every_ms < repetition.at_least_ms:
        raise ActorError(f"a {message_type} repeated every {every_ms / 1000:g} s: {repetition.requirement} asks for "
                         f"at most one every {repetition.at_least_ms / 1000:g} s", "repeat less often")


def message_ttl_ms(message_type: object, repeat_every_ms: int | None = None) -> int:
    """IP_033: the repetition interval x 1.2, at least 1 s; the broker's default for the message
    type unless the actor repeats the message itself (then its own interval)."""
    if repeat_every_ms is not None:
        return TTL.ttl_ms(repeat_every_ms)
    return default_ttl_ms(message_type)


@dataclass(frozen=True)
class OutgoingMessage:
    """One message for the Basic Interface: checked properties, body bytes, TTL and durability."""

    properties: Mapping[str, Any]
    body: bytes
    ttl_ms: int
    durable: bool = True
    problems: tuple[Problem, ...] = field(default=(), compare=False)

    @classmethod
    def build(cls, properties: Mapping[str, Any], body: bytes, *, ttl_ms: int | None = None,
              repeat_every_ms: int | None = None, durable: bool = True,
              capability_shard_count: int | None = None, check: bool = True) -> OutgoingMessage:
        """The message, its properties checked with the node's rules first (``check=False`` lets a
        test or a conformance probe send what the node would refuse, to see it refused)."""
        problems = check_properties(properties, capability_shard_count=capability_shard_count)
        if problems and check:
            raise _refused(problems)
        message_type = properties.get("messageType")
        if repeat_every_ms is not None and isinstance(message_type, str):
            check_repetition(message_type, repeat_every_ms)
        ttl = ttl_ms if ttl_ms is not None else message_ttl_ms(message_type, repeat_every_ms)
        return cls(dict(properties), bytes(body), ttl, durable, tuple(problems))

    def encode(self) -> bytes:
        """AMQP 1.0 bytes: header (durable, ttl), application properties, one data section (IP_008)."""
        message = Message(body=self.body, properties=dict(self.properties), durable=self.durable,
                          ttl=self.ttl_ms / 1000.0, inferred=True)
        return bytes(message.encode())
