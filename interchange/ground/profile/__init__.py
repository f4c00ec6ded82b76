"""The C-Roads message profile as data: message types, tables 1-7, value rules, TTL and repetition.

Contract: declarations only (frozen dataclasses, enums, tuples, read-only mappings), no checks;
this package imports nothing of the project's. Readers: the broker's validation and the header of
its C accelerator (:mod:`interchange.broker.admit_header`), its TTL policy, the audit's Spark SQL
(:mod:`spark.property_rules`, :mod:`spark.rules`), the II's capability models and the bridges, so
a property, message type or bound changed here is checked by all of them. A new *kind* of rule is
one each reader must learn (their ``match`` ends in ``assert_never``: mypy names those that do not).
Requirements: tables 1-7 (IP_022, IP_026, IP_029, IP_100, IP_103, IP_122, IP_123, IP_135),
IP_037/IP_038, IP_128-130, IP_131, IP_033 (TTL = repetition interval x 1.2, at least 1 s),
IP_048/IP_124/IP_136 (repetition), IP_112/IP_113 (area zooms).
"""
from interchange.ground.profile.messages import (
    EVENT_AREA,
    FALLBACK_INTERVAL_MS,
    INTERSECTION_AREA,
    MESSAGE_TYPES,
    REFERENCE_ZOOM,
    REPEATED_WHILE_VALID,
    TTL,
    AreaZoom,
    Level,
    MessageType,
    MessageTypeSpec,
    Repetition,
    TtlRule,
)
from interchange.ground.profile.requirements import REQUIREMENTS
from interchange.ground.profile.tables import (
    CANCELLATION,
    CROSS_RULES,
    CUSTOM_NAMES,
    EVERY_MESSAGE,
    OPTIONAL,
    PROPERTIES,
    PROPERTY_NAMES,
    TABLES,
    CancellationRule,
    CrossRule,
    CustomNames,
    Mandatory,
    Property,
    PublicationIdRule,
    ShardRule,
    Tables,
    mandatory_for,
    property_named,
)
from interchange.ground.profile.values import (
    CommaList,
    Kind,
    NonEmpty,
    OneOf,
    Pattern,
    PublisherId,
    QuadTreeTiles,
    Range,
    ValueRule,
)

__all__ = [
    "CANCELLATION", "CROSS_RULES", "CUSTOM_NAMES", "EVENT_AREA", "EVERY_MESSAGE", "FALLBACK_INTERVAL_MS",
    "INTERSECTION_AREA", "MESSAGE_TYPES", "OPTIONAL", "PROPERTIES", "PROPERTY_NAMES", "REFERENCE_ZOOM",
    "REPEATED_WHILE_VALID", "REQUIREMENTS", "TABLES", "TTL", "AreaZoom", "CancellationRule", "CommaList",
    "CrossRule", "CustomNames", "Kind", "Level", "Mandatory", "MessageType", "MessageTypeSpec", "NonEmpty",
    "OneOf", "Pattern", "Property", "PublicationIdRule", "PublisherId", "QuadTreeTiles", "Range", "Repetition",
    "ShardRule", "Tables", "TtlRule", "ValueRule", "mandatory_for", "property_named",
]
