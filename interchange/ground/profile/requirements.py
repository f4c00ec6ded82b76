"""The requirements the profile's data and the audit name, each in the profile's own words.

Each text is the requirement's sentence from the C-Roads IP Based Interface Profile, as written
there (only the scan's misreadings mended: "shardld" is shardId, "Bl" is BI). Readers show them
next to their findings, and the audit's tests hold every check against the sentence of the
requirement it cites (a check cites a requirement only where the sentence says what it tests).
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["REQUIREMENTS"]

#: Requirement id -> its sentence, for every id the tables, rules, message types and audit checks name.
REQUIREMENTS: Mapping[str, str] = MappingProxyType({
    "IP_012": "A broker shall be able to route a single message with a payload size <500KB in <30ms, defined "
              "as the time interval from message arrival (on broker target) to message availability (on broker "
              "source).",
    "IP_013": "A broker shall be able to route 5000 messages with a payload size <500KB in <1000ms, defined as "
              "the time interval from message arrival (on broker target) to message availability (on broker "
              "source).",
    "IP_016": "A broker should drop malformed AMQP messages that do not adhere to this specification or any "
              "extension of it and shall log the event.",
    "IP_022": "All mandatory fields defined in Table 1 shall be inside the AMQP application properties field for "
              "all C-ITS messages. All optional fields defined in Table 1 should be inside the AMQP application "
              "properties field for all C-ITS messages.",
    "IP_026": "All mandatory fields defined in Table 2 shall be inside AMQP application properties field for "
              "DENM messages.",
    "IP_029": "All optional fields in Table 3 should be inside AMQP application properties field for IVIM "
              "messages. String values should only contain one instance of each different value. In case the "
              "application field is a string, which may contain multiple values: the string is a comma "
              "separated list starting and ending with a comma, e.g. \",1,\" (single value) or \",1,0,2,\". "
              "If the value is not present in the message, \",-1,\" is to be used.",
    "IP_032": "A broker shall provide a buffer with a size of minimum 200 messages.",
    "IP_033": "An AMQP Message TTL (in seconds) shall be set to the BI repetition interval of the message (in "
              "seconds) multiplied by 1.2 with a minimum value of 1 second. A broker can directly enforce TTL "
              "policies, i.e. if TTL is not set, or dependent on message types.",
    "IP_037": "Geolocation method shall be based on quadtree, where each quadtree zoom level shall be "
              "represented by a single character in the string.",
    "IP_038": "C-ITS actors shall publish AMQP messages with a minimum quadtree zoom level of 18 for all the "
              "geographic reference locations of the C-ITS message.",
    "IP_048": "Each time a DENM, an IVIM, a MAPEM or a POIM-PA is created and signed by C-ITS actors to be sent "
              "on BI, the message shall be repeated at least every 9 min if still valid.",
    "IP_100": "All optional fields defined in Table 4 should be inside the AMQP application properties field "
              "for SPATEM and MAPEM messages.",
    "IP_103": "All optional fields defined in Table 5 should be inside the AMQP application properties field "
              "for SREM and SSEM messages.",
    "IP_104": "C-ITS actors shall publish SPATEM only after corresponding MAPEM has been published",
    "IP_112": "Additional to IP_038, C-ITS actors shall publish AMQP messages with a set of tiles with a minimum "
              "quadtree zoom level 13 covering the geographic reference location, the detection zone, relevance "
              "and awareness zone as well as the GeoNetworking destination area for IVIM, DENM, and POIM-PA.",
    "IP_113": "Additional to IP_038, C-ITS actors shall publish AMQP messages with a set of tiles with a minimum "
              "quadtree zoom level of 14 covering the GeoNetworking destination area of SPATEM, MAPEM, SSEM "
              "and SREM.",
    "IP_122": "All mandatory fields defined in Table 6 shall be inside the AMQP application properties field for "
              "CAM messages",
    "IP_123": "All optional fields defined in Table 6 should be inside the AMQP application properties field for "
              "CAM messages",
    "IP_124": "The frequency of CAM message distribution over BI shall be between 1 per second and 1 per 120 "
              "seconds",
    "IP_128": "If an Interchange opts to support in-order delivery of AMQP messages, that Interchange can realize "
              "this by not delivering messages with the same shardId out-of-order. In such case, if no shardId "
              "is added to the message, that should be interpreted as if all messages belonging to the same "
              "capability have the same shardId (shardId = 1 and shardCount = 1).",
    "IP_130": "When publishing messages on a capability with shardCount > 1, the producing C-ITS actor "
              "publishing the message at an Interchange shall make sure that a shardId <= shardCount is "
              "provided to messages for which the producer opted that they should be delivered in-order.",
    "IP_131": "If any additional application properties beyond the properties defined in this specification are "
              "used, they shall be name spaced according to the following pattern: "
              "custom-<unique_namespace_id>-<property_name>",
    "IP_135": "All optional fields defined in Table 7 should be inside the AMQP application properties field for "
              "CPM messages",
    "IP_136": "The frequency of CPM message distribution over BI should be 1 per second",
})
