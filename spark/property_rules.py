"""Tables 1-7 of the IP profile as Spark column expressions: the checks of interchange/broker/validation.py.

IP_022 (Table 1), IP_026 (DENM), IP_029 (IVIM, lists), IP_100/103 (SPATEM/MAPEM, SREM/SSEM lists),
IP_122/123 (CAM), IP_135 (CPM), IP_037/038 (quadTree), IP_128/130 (shardId, shardCount), IP_131
(custom names). The same checks, in the same order and with the same requirement per finding, as
:func:`interchange.broker.validation.validate_application_properties` without a capability
(a differential test holds them together). Types: the log keeps each value's JSON kind
(``propertyKinds``), which is what a JSON reader can know of its AMQP type: a string is "a
string", an integer number "an integer", a number with a fraction or exponent "a float or double".
The checks read the messages table's columns of tables 1-7 (``standardProperties``,
``standardKinds``, ``otherPropertyNames``), never the two maps: a struct field is read where a map
lookup searches the keys, 23 times per message. No Python UDF: regular expressions (Java's, anchored with ``\\z`` because ``$`` would accept a
trailing newline), casts and higher-order functions, evaluated in the JVM.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from interchange.broker.validation import MESSAGE_TYPES, STANDARD_PROPERTIES
from spark.tables import PROPERTY_COLUMNS

STRING, INTEGER, FLOAT = "string", "integer", "float"
#: The messages table's columns of tables 1-7's values and JSON kinds, and of the other names (spark.tables.MESSAGES).
VALUES, KINDS, OTHER_NAMES = COLUMNS = PROPERTY_COLUMNS
_EXPECTED_KIND = {STRING: "a string", INTEGER: "an integer", FLOAT: "a float or double"}

#: A value check: the value's text -> [(bad, requirement, what is expected)], the first bad one wins.
ValueCheck = Callable[[Column], list[tuple[Column, str, str]]]

_LIST = r"^,(?:[^,]+,)+\z"
_INTEGER_LIST = r"^,(?:-?[0-9]+,)+\z"
_QUADTREE_FORM = r"^,(?:[0-3]+,)+\z"
_CUSTOM_NAME = r"(?s)^custom-[^-]+-.+\z"
REFERENCE_ZOOM = 18


def _number(value: Column) -> Column:
    return value.try_cast("decimal(38,0)")  # JSON integers beyond a long stay comparable (out of range)


def _range(low: int | float, high: int | float, requirement: str) -> ValueCheck:
    def check(value: Column) -> list[tuple[Column, str, str]]:
        number = value.try_cast("double") if isinstance(low, float) else _number(value)
        inside = number.between(low, high)
        return [(F.coalesce(~inside, F.lit(True)), requirement, f"{low} to {high}")]

    return check


def _pattern(regex: str, requirement: str, expected: str) -> ValueCheck:
    return lambda value: [(~value.rlike(regex), requirement, expected)]


def _publisher_id(value: Column) -> list[tuple[Column, str, str]]:
    number = _number(value.substr(3, 10))
    bad = ~value.rlike(r"^[A-Z]{2}[0-9]{1,5}\z") | F.coalesce(number > 16383, F.lit(True))
    return [(bad, "IP_022", "2 uppercase letters and a number 0-16383 (ISO 14816)")]


def _cause_code(value: Column) -> list[tuple[Column, str, str]]:
    number = _number(value)
    good = (number == -1) | number.between(0, 255)
    return [(F.coalesce(~good, F.lit(True)), "IP_026", "0 to 255, or -1 for a cancellation")]


def _quadtree(value: Column) -> list[tuple[Column, str, str]]:
    return [(~value.rlike(_QUADTREE_FORM), "IP_037", "',t1,t2,' with tiles of the digits 0-3"),
            (~value.rlike(f",[0-3]{{{REFERENCE_ZOOM}}}"), "IP_038",
             f"a tile of zoom level {REFERENCE_ZOOM} or more")]


_LIST_CHECK = _pattern(_LIST, "IP_029", "a comma separated list like ',a,b,'")
_INTEGER_LIST_CHECK = _pattern(_INTEGER_LIST, "IP_029", "a comma separated list of integers like ',557,559,'")

#: name -> (JSON kind, requirement of its table, value check): tables 1-7, as validation._SPEC.
SPEC: dict[str, tuple[str, str, ValueCheck | None]] = {
    "publisherId": (STRING, "IP_022", _publisher_id),
    "publicationId": (STRING, "IP_022", None),
    "originatingCountry": (STRING, "IP_022", _pattern(r"^[A-Z]{2}\z", "IP_022", "ISO 3166-1 alpha-2 (2 uppercase letters)")),
    "protocolVersion": (STRING, "IP_022", lambda v: [(v == "", "IP_022", "not empty")]),
    "serviceType": (STRING, "IP_022", _LIST_CHECK),
    "baselineVersion": (STRING, "IP_022", lambda v: [(v == "", "IP_022", "not empty")]),
    "messageType": (STRING, "IP_022", lambda v: [(~v.isin(*MESSAGE_TYPES), "IP_022", "one of " + ", ".join(sorted(MESSAGE_TYPES)))]),
    "longitude": (FLOAT, "IP_022", _range(-180.0, 180.0, "IP_022")),
    "latitude": (FLOAT, "IP_022", _range(-90.0, 90.0, "IP_022")),
    "quadTree": (STRING, "IP_022", _quadtree),
    "shardId": (INTEGER, "IP_022", None),
    "shardCount": (INTEGER, "IP_022", _range(1, 2**31 - 1, "IP_022")),
    "causeCode": (INTEGER, "IP_026", _cause_code),
    "subCauseCode": (INTEGER, "IP_026", _cause_code),
    "iviStatus": (INTEGER, "IP_029", _range(0, 7, "IP_029")),
    "iviType": (STRING, "IP_029", _INTEGER_LIST_CHECK),
    "pictogramCategoryCode": (STRING, "IP_029", _INTEGER_LIST_CHECK),
    "iviContainer": (STRING, "IP_029", _LIST_CHECK),
    "id": (STRING, "IP_100", _LIST_CHECK),
    "name": (STRING, "IP_100", _LIST_CHECK),
    "stationType": (INTEGER, "IP_122", _range(0, 255, "IP_122")),
    "vehicleRole": (INTEGER, "IP_123", _range(0, 15, "IP_123")),
    "type": (STRING, "IP_135", lambda v: [(~v.isin("Vehicle", "RSU"), "IP_135", "'Vehicle' or 'RSU'")]),
}
assert frozenset(SPEC) == STANDARD_PROPERTIES, "tables 1-7 differ from interchange.broker.validation"

_MANDATORY_ALL = ("publisherId", "originatingCountry", "protocolVersion", "messageType", "quadTree")
_MANDATORY_BY_TYPE = {"DENM": (("causeCode", "subCauseCode"), "IP_026"), "CAM": (("stationType",), "IP_122")}

#: Every requirement a finding of this module can name.
REQUIREMENTS = ("IP_022", "IP_026", "IP_029", "IP_037", "IP_038", "IP_100", "IP_122", "IP_123",
                "IP_128", "IP_130", "IP_131", "IP_135")


def _finding(name: str, requirement: str | Column, observed: Column, expected: str) -> Column:
    return F.struct(F.lit(name).alias("property"), F.lit(requirement).alias("rule") if isinstance(requirement, str)
                    else requirement.alias("rule"), observed.alias("observed"), F.lit(expected).alias("expected"))


class _Message:
    """Column expressions over one message's properties (the typed columns of the messages table)."""

    def value(self, name: str) -> Column:
        return F.col(VALUES)[name]

    def present(self, name: str) -> Column:
        return self.kind(name).isNotNull()

    def kind(self, name: str) -> Column:
        return F.col(KINDS)[name]

    def kind_ok(self, name: str) -> Column:
        return F.coalesce(self.kind(name) == SPEC[name][0], F.lit(False))

    def observed(self, name: str) -> Column:
        return F.concat(F.lit(name + "="), F.coalesce(self.value(name), F.lit("null")))

    def value_bad(self, name: str) -> list[tuple[Column, str, str]]:
        check = SPEC[name][2]
        return [] if check is None else check(self.value(name))

    def valid(self, name: str) -> Column:
        """Present, of its kind and passing its value check (validation.py's ``valid``)."""
        result = self.present(name) & self.kind_ok(name)
        for bad, _, _ in self.value_bad(name):
            result = result & ~F.coalesce(bad, F.lit(False))
        return result

    def property_finding(self, name: str) -> Column:
        """The first problem of one standard property (type, then value), as a finding or null."""
        kind, requirement, _ = SPEC[name]
        kind_text = F.coalesce(self.kind(name), F.lit("?"))
        result = F.when(self.present(name) & ~self.kind_ok(name),
                        _finding(name, requirement, F.concat(F.lit(name + " is JSON "), kind_text), _EXPECTED_KIND[kind]))
        for bad, rule, expected in self.value_bad(name):
            result = result.when(self.present(name) & F.coalesce(bad, F.lit(False)),
                                 _finding(name, rule, self.observed(name), expected))
        return result


def findings() -> Column:
    """array<struct<property, rule, observed, expected>>: every problem of one message's properties."""
    m = _Message()
    items = [m.property_finding(name) for name in SPEC]
    items += [F.when(~m.present(name), _finding(name, "IP_022", F.lit("absent"), "present (every C-ITS message)"))
              for name in _MANDATORY_ALL]
    message_type = F.when(m.valid("messageType"), m.value("messageType"))
    for type_name, (names, requirement) in _MANDATORY_BY_TYPE.items():
        items += [F.when((message_type == type_name) & ~m.present(name),
                         _finding(name, requirement, F.lit("absent"), f"present (mandatory for {type_name})"))
                  for name in names]
    items += [_publication_id(m), _denm_cancellation(m, message_type), *_shards(m)]
    unknown = F.filter(F.col(OTHER_NAMES), lambda k: ~k.rlike(_CUSTOM_NAME))
    custom = F.transform(unknown, lambda k: F.struct(k.alias("property"), F.lit("IP_131").alias("rule"),
                                                      k.alias("observed"), F.lit("custom-<namespace>-<name>").alias("expected")))
    return F.concat(custom, F.filter(F.array(*items), lambda f: f.isNotNull()))


def valid() -> Column:
    """True exactly for a message :func:`findings` finds nothing in (the cheap test run on every message).

    Most messages are valid, so validate tests this first and builds findings only where it is
    false: each standard property absent or of its kind, every other name a custom one, then each
    value check only on the properties present and the checks across properties.
    """
    m = _Message()
    props = m.value
    conditions = [F.forall(F.col(OTHER_NAMES), lambda k: k.rlike(_CUSTOM_NAME))]
    conditions += [m.kind(name).isNull() | (m.kind(name) == kind) for name, (kind, _, _) in SPEC.items()]
    conditions += [props(name).isNotNull() for name in _MANDATORY_ALL]
    for name in SPEC:  # of its kind when present, so a null value is an absent one here
        conditions += [props(name).isNull() | ~F.coalesce(bad, F.lit(False)) for bad, _, _ in m.value_bad(name)]
    message_type = props("messageType")
    for type_name, (names, _) in _MANDATORY_BY_TYPE.items():
        conditions.append((message_type != type_name) | reduce(Column.__and__, [props(n).isNotNull() for n in names]))
    publisher_id, publication_id = props("publisherId"), props("publicationId")
    conditions.append(publication_id.isNull() | (publication_id.startswith(F.concat(publisher_id, F.lit(":")))
                                                 & (F.length(publication_id) > F.length(publisher_id) + 1)))
    cancellation = (_number(props("causeCode")) == -1) == (_number(props("subCauseCode")) == -1)
    conditions.append((message_type != "DENM") | F.coalesce(cancellation, F.lit(True)))
    shard_id, shard_count = _number(props("shardId")), _number(props("shardCount"))
    conditions.append(props("shardCount").isNull() | props("shardId").isNotNull())
    conditions.append(props("shardId").isNull()
                      | F.coalesce((shard_id >= 1) & (shard_count.isNull() | (shard_id <= shard_count)), F.lit(False)))
    return F.coalesce(reduce(Column.__and__, conditions), F.lit(False))


def _publication_id(m: _Message) -> Column:
    value = m.value("publicationId")
    colon = F.instr(value, ":")
    publisher = F.substring_index(value, ":", 1)
    local = value.substr(colon + 1, F.length(value))
    malformed = (colon == 0) | (publisher == "") | (local == "")
    checked = m.valid("publicationId")
    return (F.when(checked & malformed, _finding("publicationId", "IP_022", m.observed("publicationId"), "'<publisherId>:<id>'"))
            .when(checked & m.valid("publisherId") & (publisher != m.value("publisherId")),
                  _finding("publicationId", "IP_022", m.observed("publicationId"), "starts with the publisherId")))


def _denm_cancellation(m: _Message, message_type: Column) -> Column:
    cause, sub = _number(m.value("causeCode")), _number(m.value("subCauseCode"))
    mismatch = (cause == -1) != (sub == -1)
    both = (message_type == "DENM") & m.valid("causeCode") & m.valid("subCauseCode")
    return F.when(both & mismatch, _finding("subCauseCode", "IP_026", m.observed("subCauseCode"),
                                            "-1 together with causeCode for a cancellation"))


def _shards(m: _Message) -> list[Column]:
    shard_id, shard_count = _number(m.value("shardId")), _number(m.value("shardCount"))
    id_valid, count_valid = m.valid("shardId"), m.valid("shardCount")
    missing = F.when(~id_valid & count_valid & ~m.present("shardId"),
                     _finding("shardId", "IP_130", F.lit("absent"), "present while shardCount is set"))
    wrong = (F.when(id_valid & (shard_id < 1), _finding("shardId", "IP_128", m.observed("shardId"), "1 or more"))
             .when(id_valid & count_valid & (shard_id > shard_count),
                   _finding("shardId", "IP_130", m.observed("shardId"), "at most shardCount")))
    return [missing, wrong]
