"""Tables 1-7 of the IP profile as Spark SQL expressions: the checks of interchange/broker/validation.py.

IP_022 (Table 1), IP_026 (DENM), IP_029 (IVIM, lists), IP_100/103 (SPATEM/MAPEM, SREM/SSEM lists),
IP_122/123 (CAM), IP_135 (CPM), IP_037/038 (quadTree), IP_128/130 (shardId, shardCount), IP_131
(custom names). The same checks, in the same order and with the same requirement per finding, as
:func:`interchange.broker.validation.validate_application_properties` without a capability
(a differential test holds them together). Types: the log keeps each value's JSON kind
(``propertyKinds``), which is what a JSON reader can know of its AMQP type: a string is "a
string", an integer number "an integer", a number with a fraction or exponent "a float or double".

The checks read the messages table's columns of tables 1-7 (``standardProperties``,
``standardKinds``, ``otherPropertyNames``), never the two maps: a struct field is read where a map
lookup searches the keys, 23 times per message. They are written as Spark SQL text, parsed once
(:func:`findings` and :func:`valid` are one ``F.expr`` each): built as Column objects they took
~65,000 calls from Python into the JVM, ~2 s before every validate. No Python UDF: regular
expressions (Java's, anchored with ``\\z`` because ``$`` would accept a trailing newline), casts
and higher-order functions, evaluated in the JVM.
"""
from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from interchange.broker.validation import MESSAGE_TYPES, STANDARD_PROPERTIES
from spark.tables import PROPERTY_COLUMNS

STRING, INTEGER, FLOAT = "string", "integer", "float"
#: The messages table's columns of tables 1-7's values and JSON kinds, and of the other names (spark.tables.MESSAGES).
VALUES, KINDS, OTHER_NAMES = COLUMNS = PROPERTY_COLUMNS
_EXPECTED_KIND = {STRING: "a string", INTEGER: "an integer", FLOAT: "a float or double"}

#: Spark SQL expression text.
Sql = str
#: A value check: the value's text -> [(bad, requirement, what is expected)], the first bad one wins.
ValueCheck = Callable[[Sql], list[tuple[Sql, str, str]]]

_LIST = r"^,(?:[^,]+,)+\z"
_INTEGER_LIST = r"^,(?:-?[0-9]+,)+\z"
_QUADTREE_FORM = r"^,(?:[0-3]+,)+\z"
_CUSTOM_NAME = r"(?s)^custom-[^-]+-.+\z"
_PUBLISHER_ID = r"^[A-Z]{2}[0-9]{1,5}\z"
REFERENCE_ZOOM = 18
_ZOOM = f",[0-3]{{{REFERENCE_ZOOM}}}"


def _lit(text: str) -> Sql:
    """A SQL string literal of ``text`` (Spark's parser unescapes backslashes and quotes in literals)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _all(*conditions: Sql) -> Sql:
    return "(" + " AND ".join(conditions) + ")"


def _any(*conditions: Sql) -> Sql:
    return "(" + " OR ".join(conditions) + ")"


def _not(condition: Sql) -> Sql:
    return f"(NOT {condition})"


def _case(*branches: tuple[Sql, Sql]) -> Sql:
    """CASE WHEN ... THEN ... END (null when no condition holds)."""
    return "CASE " + " ".join(f"WHEN {when} THEN {then}" for when, then in branches) + " END"


def _number(value: Sql) -> Sql:
    return f"try_cast({value} AS DECIMAL(38,0))"  # JSON integers beyond a long stay comparable (out of range)


def _range(low: int | float, high: int | float, requirement: str) -> ValueCheck:
    def check(value: Sql) -> list[tuple[Sql, str, str]]:
        if isinstance(low, float):
            inside = f"try_cast({value} AS DOUBLE) BETWEEN {low!r}D AND {high!r}D"
        else:
            inside = f"{_number(value)} BETWEEN {low} AND {high}"
        return [(f"coalesce(NOT ({inside}), true)", requirement, f"{low} to {high}")]

    return check


def _pattern(regex: str, requirement: str, expected: str) -> ValueCheck:
    return lambda value: [(_not(f"({value} RLIKE {_lit(regex)})"), requirement, expected)]


def _publisher_id(value: Sql) -> list[tuple[Sql, str, str]]:
    number = _number(f"substring({value}, 3, 10)")
    bad = _any(_not(f"({value} RLIKE {_lit(_PUBLISHER_ID)})"), f"coalesce({number} > 16383, true)")
    return [(bad, "IP_022", "2 uppercase letters and a number 0-16383 (ISO 14816)")]


def _cause_code(value: Sql) -> list[tuple[Sql, str, str]]:
    number = _number(value)
    good = _any(f"{number} = -1", f"{number} BETWEEN 0 AND 255")
    return [(f"coalesce(NOT {good}, true)", "IP_026", "0 to 255, or -1 for a cancellation")]


def _quadtree(value: Sql) -> list[tuple[Sql, str, str]]:
    return [(_not(f"({value} RLIKE {_lit(_QUADTREE_FORM)})"), "IP_037", "',t1,t2,' with tiles of the digits 0-3"),
            (_not(f"({value} RLIKE {_lit(_ZOOM)})"), "IP_038",
             f"a tile of zoom level {REFERENCE_ZOOM} or more")]


def _one_of(*allowed: str) -> Callable[[Sql], Sql]:
    return lambda value: _not(f"({value} IN ({', '.join(map(_lit, allowed))}))")


def _not_empty(value: Sql) -> list[tuple[Sql, str, str]]:
    return [(f"({value} = '')", "IP_022", "not empty")]


_LIST_CHECK = _pattern(_LIST, "IP_029", "a comma separated list like ',a,b,'")
_INTEGER_LIST_CHECK = _pattern(_INTEGER_LIST, "IP_029", "a comma separated list of integers like ',557,559,'")
_MESSAGE_TYPE = _one_of(*sorted(MESSAGE_TYPES))
_CPM_TYPE = _one_of("Vehicle", "RSU")

#: name -> (JSON kind, requirement of its table, value check): tables 1-7, as validation._SPEC.
SPEC: dict[str, tuple[str, str, ValueCheck | None]] = {
    "publisherId": (STRING, "IP_022", _publisher_id),
    "publicationId": (STRING, "IP_022", None),
    "originatingCountry": (STRING, "IP_022", _pattern(r"^[A-Z]{2}\z", "IP_022", "ISO 3166-1 alpha-2 (2 uppercase letters)")),
    "protocolVersion": (STRING, "IP_022", _not_empty),
    "serviceType": (STRING, "IP_022", _LIST_CHECK),
    "baselineVersion": (STRING, "IP_022", _not_empty),
    "messageType": (STRING, "IP_022", lambda v: [(_MESSAGE_TYPE(v), "IP_022", "one of " + ", ".join(sorted(MESSAGE_TYPES)))]),
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
    "type": (STRING, "IP_135", lambda v: [(_CPM_TYPE(v), "IP_135", "'Vehicle' or 'RSU'")]),
}
assert frozenset(SPEC) == STANDARD_PROPERTIES, "tables 1-7 differ from interchange.broker.validation"

_MANDATORY_ALL = ("publisherId", "originatingCountry", "protocolVersion", "messageType", "quadTree")
_MANDATORY_BY_TYPE = {"DENM": (("causeCode", "subCauseCode"), "IP_026"), "CAM": (("stationType",), "IP_122")}

#: Every requirement a finding of this module can name.
REQUIREMENTS = ("IP_022", "IP_026", "IP_029", "IP_037", "IP_038", "IP_100", "IP_122", "IP_123",
                "IP_128", "IP_130", "IP_131", "IP_135")


def _finding(name: str, requirement: str, observed: Sql, expected: str) -> Sql:
    return (f"named_struct('property', {_lit(name)}, 'rule', {_lit(requirement)}, 'observed', {observed}, "
            f"'expected', {_lit(expected)})")


class _Message:
    """SQL expressions over one message's properties (the typed columns of the messages table)."""

    def value(self, name: str) -> Sql:
        return f"{VALUES}.`{name}`"

    def present(self, name: str) -> Sql:
        return f"({self.kind(name)} IS NOT NULL)"

    def kind(self, name: str) -> Sql:
        return f"{KINDS}.`{name}`"

    def kind_ok(self, name: str) -> Sql:
        return f"coalesce({self.kind(name)} = {_lit(SPEC[name][0])}, false)"

    def observed(self, name: str) -> Sql:
        return f"concat({_lit(name + '=')}, coalesce({self.value(name)}, 'null'))"

    def value_bad(self, name: str) -> list[tuple[Sql, str, str]]:
        check = SPEC[name][2]
        return [] if check is None else check(self.value(name))

    def valid(self, name: str) -> Sql:
        """Present, of its kind and passing its value check (validation.py's ``valid``)."""
        return _all(self.present(name), self.kind_ok(name),
                    *[_not(f"coalesce({bad}, false)") for bad, _, _ in self.value_bad(name)])

    def property_finding(self, name: str) -> Sql:
        """The first problem of one standard property (type, then value), as a finding or null."""
        kind, requirement, _ = SPEC[name]
        kind_text = f"coalesce({self.kind(name)}, '?')"
        branches = [(_all(self.present(name), _not(self.kind_ok(name))),
                     _finding(name, requirement, f"concat({_lit(name + ' is JSON ')}, {kind_text})", _EXPECTED_KIND[kind]))]
        branches += [(_all(self.present(name), f"coalesce({bad}, false)"), _finding(name, rule, self.observed(name), expected))
                     for bad, rule, expected in self.value_bad(name)]
        return _case(*branches)


def findings_sql() -> Sql:
    """array<struct<property, rule, observed, expected>>: every problem of one message's properties."""
    m = _Message()
    items = [m.property_finding(name) for name in SPEC]
    items += [_case((_not(m.present(name)), _finding(name, "IP_022", "'absent'", "present (every C-ITS message)")))
              for name in _MANDATORY_ALL]
    message_type = _case((m.valid("messageType"), m.value("messageType")))
    for type_name, (names, requirement) in _MANDATORY_BY_TYPE.items():
        items += [_case((_all(f"({message_type} = {_lit(type_name)})", _not(m.present(name))),
                         _finding(name, requirement, "'absent'", f"present (mandatory for {type_name})")))
                  for name in names]
    items += [_publication_id(m), _denm_cancellation(m, message_type), *_shards(m)]
    custom = (f"transform(filter({OTHER_NAMES}, k -> NOT (k RLIKE {_lit(_CUSTOM_NAME)})), k -> named_struct("
              f"'property', k, 'rule', 'IP_131', 'observed', k, 'expected', 'custom-<namespace>-<name>'))")
    return f"concat({custom}, filter(array({', '.join(items)}), f -> f IS NOT NULL))"


def findings() -> Column:
    """:func:`findings_sql` as a column."""
    return F.expr(findings_sql())


def valid_sql() -> Sql:
    """True exactly for a message :func:`findings` finds nothing in (the cheap test run on every message).

    Most messages are valid, so validate tests this first and builds findings only where it is
    false: each standard property absent or of its kind, every other name a custom one, then each
    value check only on the properties present and the checks across properties.
    """
    m = _Message()
    value = m.value
    conditions = [f"forall({OTHER_NAMES}, k -> k RLIKE {_lit(_CUSTOM_NAME)})"]
    conditions += [_any(f"{m.kind(name)} IS NULL", f"{m.kind(name)} = {_lit(kind)}") for name, (kind, _, _) in SPEC.items()]
    conditions += [f"{value(name)} IS NOT NULL" for name in _MANDATORY_ALL]
    for name in SPEC:  # of its kind when present, so a null value is an absent one here
        conditions += [_any(f"{value(name)} IS NULL", _not(f"coalesce({bad}, false)")) for bad, _, _ in m.value_bad(name)]
    message_type = value("messageType")
    for type_name, (names, _) in _MANDATORY_BY_TYPE.items():
        conditions.append(_any(_not(f"({message_type} = {_lit(type_name)})"), _all(*[f"{value(n)} IS NOT NULL" for n in names])))
    publisher_id, publication_id = value("publisherId"), value("publicationId")
    conditions.append(_any(f"{publication_id} IS NULL",
                           _all(f"startswith({publication_id}, concat({publisher_id}, ':'))",
                                f"length({publication_id}) > length({publisher_id}) + 1")))
    cancellation = f"(({_number(value('causeCode'))} = -1) = ({_number(value('subCauseCode'))} = -1))"
    conditions.append(_any(_not(f"({message_type} = 'DENM')"), f"coalesce({cancellation}, true)"))
    shard_id, shard_count = _number(value("shardId")), _number(value("shardCount"))
    conditions.append(_any(f"{value('shardCount')} IS NULL", f"{value('shardId')} IS NOT NULL"))
    conditions.append(_any(f"{value('shardId')} IS NULL",
                           f"coalesce({_all(f'{shard_id} >= 1', _any(f'{shard_count} IS NULL', f'{shard_id} <= {shard_count}'))}, false)"))
    return f"coalesce({_all(*conditions)}, false)"


def valid() -> Column:
    """:func:`valid_sql` as a column."""
    return F.expr(valid_sql())


def _publication_id(m: _Message) -> Sql:
    value = m.value("publicationId")
    colon = f"instr({value}, ':')"
    publisher = f"substring_index({value}, ':', 1)"
    local = f"substring({value}, {colon} + 1, length({value}))"
    malformed = _any(f"{colon} = 0", f"{publisher} = ''", f"{local} = ''")
    checked = m.valid("publicationId")
    return _case((_all(checked, malformed), _finding("publicationId", "IP_022", m.observed("publicationId"), "'<publisherId>:<id>'")),
                 (_all(checked, m.valid("publisherId"), _not(f"({publisher} = {m.value('publisherId')})")),
                  _finding("publicationId", "IP_022", m.observed("publicationId"), "starts with the publisherId")))


def _denm_cancellation(m: _Message, message_type: Sql) -> Sql:
    cause, sub = _number(m.value("causeCode")), _number(m.value("subCauseCode"))
    mismatch = _not(f"(({cause} = -1) = ({sub} = -1))")
    both = _all(f"({message_type} = 'DENM')", m.valid("causeCode"), m.valid("subCauseCode"))
    return _case((_all(both, mismatch), _finding("subCauseCode", "IP_026", m.observed("subCauseCode"),
                                                 "-1 together with causeCode for a cancellation")))


def _shards(m: _Message) -> list[Sql]:
    shard_id, shard_count = _number(m.value("shardId")), _number(m.value("shardCount"))
    id_valid, count_valid = m.valid("shardId"), m.valid("shardCount")
    missing = _case((_all(_not(id_valid), count_valid, _not(m.present("shardId"))),
                     _finding("shardId", "IP_130", "'absent'", "present while shardCount is set")))
    wrong = _case((_all(id_valid, f"({shard_id} < 1)"), _finding("shardId", "IP_128", m.observed("shardId"), "1 or more")),
                  (_all(id_valid, count_valid, f"({shard_id} > {shard_count})"),
                   _finding("shardId", "IP_130", m.observed("shardId"), "at most shardCount")))
    return [missing, wrong]
