"""``interchange.actor``: the client toolkit of a C-ITS actor (a road authority's back-office, a
service provider, a roadside unit) publishing and subscribing through an interchange.

The library (asyncio) and the ``interchange actor ...`` command line over it (:mod:`.cli`):

* settings (:mod:`.settings`): node name, II URL or DNS discovery, the actor's TLS files;
* the local actor API (:mod:`.api`): whoami, capabilities, deliveries, subscriptions, waiting
  for a final status, the federation's capabilities;
* capabilities (:mod:`.capabilities`) and message properties (:mod:`.properties`) built from typed
  arguments and areas (:mod:`.areas`: point + radius, polygon, tiles -> quadtree tiles), checked
  with the node's own rules: the II's models and the broker's validation, both built from the
  profile (:mod:`interchange.ground.profile`), TTL per IP_033;
* selectors (:mod:`.selectors`): the broker's parser (NOT_VALID's words) and the II's matching
  (NO_OVERLAP's decision, and why);
* the Basic Interface (:mod:`.amqp`): publish with the broker's outcome, listen with explicit
  settlement and flow control (mutual TLS, SASL EXTERNAL);
* :class:`Actor` (:mod:`.client`) puts them together. docs/actors.md is the quick start.
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
