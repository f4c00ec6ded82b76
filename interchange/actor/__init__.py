"""``interchange.actor``: the client toolkit of a C-ITS actor (a road authority's back-office, a
service provider, a roadside unit) publishing and subscribing through an interchange.

The library (asyncio) and the ``interchange actor ...`` command line over it (:mod:`.cli`):
settings (:mod:`.settings`), the local actor API (:mod:`.api`), capabilities and message
properties from typed arguments and areas (:mod:`.capabilities`, :mod:`.properties`,
:mod:`.areas`), checked with the node's own rules (TTL per IP_033), selectors (:mod:`.selectors`),
the Basic Interface (:mod:`.amqp`), and :class:`Actor` (:mod:`.client`) putting them together.
docs/actors.md is the quick start and the table of the pieces.
"""
from interchange.actor.amqp import BiConnection, Listener, PublishOutcome, Publisher, Received
from interchange.actor.api import ActorApi, own_common_name
from interchange.actor.areas import Area, Circle, Polygon, Tiles, area_tiles, area_zoom, reference_tile
from interchange.actor.capabilities import build_capability, capability_from_json
from interchange.actor.client import EVERYTHING, Actor
from interchange.actor.errors import ActorError
from interchange.actor.properties import OutgoingMessage, check_properties, message_properties, message_ttl_ms
from interchange.actor.selectors import CapabilityVerdict, Overlap, SelectorProblem, check_selector, overlap
from interchange.actor.settings import ActorSettings, DnsDiscovery, load_settings

__all__ = [
    "EVERYTHING", "Actor", "ActorApi", "ActorError", "ActorSettings", "Area", "BiConnection", "CapabilityVerdict",
    "Circle", "DnsDiscovery", "Listener", "OutgoingMessage", "Overlap", "Polygon", "PublishOutcome", "Publisher",
    "Received", "SelectorProblem", "Tiles", "area_tiles", "area_zoom", "build_capability", "capability_from_json",
    "check_properties", "check_selector", "load_settings", "message_properties", "message_ttl_ms",
    "own_common_name", "overlap", "reference_tile",
]
