"""The requirements the profile's data names, each in a sentence (the audit's reports show them)."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["REQUIREMENTS"]

#: Requirement id -> what it asks, for every id the tables, rules and message types name.
REQUIREMENTS: Mapping[str, str] = MappingProxyType({
    "IP_022": "All mandatory fields of Table 1 shall be inside the AMQP application properties of every "
              "C-ITS message; optional fields as Table 1 defines them.",
    "IP_026": "All mandatory fields of Table 2 shall be inside the application properties of DENM messages.",
    "IP_029": "IVIM fields of Table 3, and comma separated string lists (',a,b,').",
    "IP_033": "An AMQP message TTL shall be the BI repetition interval x 1.2 (minimum 1 s); a broker can "
              "enforce TTL policies: no message is delivered after its expiry.",
    "IP_037": "Geolocation shall be based on quadtree: the quadTree property lists tiles of the digits 0-3.",
    "IP_038": "C-ITS actors shall publish AMQP messages with a minimum quadtree zoom level of 18 for the "
              "geographic reference locations.",
    "IP_048": "Each DENM, IVIM, MAPEM or POIM-PA shall be repeated on BI at least every 9 min while still valid.",
    "IP_100": "SPATEM/MAPEM (Table 4) and SREM/SSEM (Table 5) fields: id and name are comma separated lists.",
    "IP_103": "Optional fields of Table 5 (SREM/SSEM) should be inside the application properties.",
    "IP_112": "IVIM, DENM and POIM-PA carry tiles of zoom level 13 covering their areas, besides IP_038's.",
    "IP_113": "SPATEM, MAPEM, SSEM and SREM carry tiles of zoom level 14 covering their destination area.",
    "IP_122": "All mandatory fields of Table 6 shall be inside the application properties of CAM messages.",
    "IP_123": "Optional fields of Table 6 (CAM): vehicleRole is an integer 0-15.",
    "IP_124": "The frequency of CAM message distribution over BI shall be between 1 per second and 1 per 120 seconds.",
    "IP_128": "In-order delivery: messages with the same shardId are not delivered out of order "
              "(no shardId = shard 1).",
    "IP_130": "On a capability with shardCount > 1 a shardId <= shardCount is provided.",
    "IP_131": "Application properties beyond the specification shall be named custom-<namespace>-<name>.",
    "IP_135": "Optional fields of Table 7 (CPM): type is 'Vehicle' or 'RSU'.",
    "IP_136": "The frequency of CPM message distribution over BI should be 1 per second.",
})
