"""A capability (Tables 10-12) built from typed arguments and checked before it is sent.

The area becomes the capability's ``quadTree`` (tiles of the message type's area zoom, IP_112/113,
unless a zoom is given); the document is then validated by the II's own models
(:class:`ii_api.wire.models.Capability`, whose value rules are the profile's: publisherId,
originatingCountry, causeCode, stationType, publicationId ``<publisherId>:<id>``), so a capability
the node would answer 400 for is refused here with the same words, naming the field.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ii_api.wire.errors import describe_validation_error
from ii_api.wire.models import Capability, LocalCapabilitiesRequest
from interchange.actor.areas import Area, area_tiles, area_zoom
from interchange.actor.errors import ActorError
from interchange.actor.properties import publication_id_of

__all__ = ["build_capability", "capability_from_json"]


def capability_from_json(document: Mapping[str, Any]) -> Capability:
    """A capability document checked as the node checks it (400 there, ActorError here)."""
    try:
        return LocalCapabilitiesRequest.model_validate({"capabilities": [dict(document)]}).capabilities[0]
    except ValidationError as exc:
        message, _ = describe_validation_error(exc)
        raise ActorError(f"the node would refuse this capability: {message.replace('capabilities.0.', '')}",
                         "fix the value it names") from None


def build_capability(*, message_type: str, publisher_id: str, publication_id: str, protocol_version: str,
                     area: Area, originating_country: str | None = None, zoom: int | None = None,
                     cause_codes: list[int] | None = None, station_types: list[int] | None = None,
                     ids: list[str] | None = None, shard_count: int | None = None, redirect_policy: str | None = None,
                     info_url: str | None = None, repetition_interval_ms: int | None = None,
                     application: Mapping[str, Any] | None = None) -> Capability:
    """One capability: what the actor publishes of one message type, where (``area``).

    ``publication_id`` without ``:`` gets the publisherId in front (IP_022); the country defaults
    to the publisherId's letters. ``application`` adds or replaces application properties
    (e.g. ``iviType``, ``custom-<ns>-<name>``)."""
    app: dict[str, Any] = {
        "messageType": message_type, "publisherId": publisher_id,
        "publicationId": publication_id_of(publisher_id, publication_id),
        "originatingCountry": originating_country or publisher_id[:2], "protocolVersion": protocol_version,
        "quadTree": area_tiles(area, zoom if zoom is not None else area_zoom(message_type)),
    }
    optional_app = {"causeCode": cause_codes, "stationType": station_types, "ids": ids}
    app.update({k: v for k, v in optional_app.items() if v is not None})
    if message_type == "DENM":
        app.setdefault("causeCode", None)  # Table 11: mandatory, null when unknown
    app.update(application or {})
    metadata = {"shardCount": shard_count, "redirectPolicy": redirect_policy, "infoURL": info_url,
                "repetitionInterval": repetition_interval_ms}
    return capability_from_json({"application": app,
                                 "metadata": {k: v for k, v in metadata.items() if v is not None}})
