"""Tables 1-7 of the IP profile as Spark SQL expressions, built from :mod:`interchange.ground.profile`.

IP_022 (Table 1), IP_026 (DENM), IP_029 (IVIM), IP_100/103 (SPATEM/MAPEM, SREM/SSEM: ``id`` names
the table of the message's type), IP_122/123 (CAM), IP_135 (CPM), IP_037/038 (quadTree), IP_128/130 (shardId, shardCount), IP_131
(custom names). Every property, value rule, mandatory property and rule across properties of the
profile becomes an expression here, in the profile's order and with the requirement the profile
gives it: the findings are those of
:func:`interchange.broker.validation.validate_application_properties` without a capability (a
differential test holds them together). Types: the log keeps each value's JSON kind
(``standardKinds``), which is what a JSON reader can know of its AMQP type: a string is "a
string", an integer number "an integer", a number with a fraction or exponent "a float or double".

The checks read the messages table's columns of tables 1-7 (``standardProperties``,
``standardKinds``) and the names of the other properties (the keys of ``otherProperties``): a struct
field is read where a map lookup searches the keys, 23 times per message. Two forms of the same checks:
- validate runs a Java function (``spark/jvm/src/croads/validate``, :data:`FUNCTION`) that reads the
  tables as data (:meth:`TableRules.function_spec`, built here from the profile, every text of a finding
  included): no SQL to parse, analyse and optimise per validate, and no 231 KB generated class for the
  JIT to compile in every new JVM. It is a Catalyst expression (``TableChecks.java``), not a user-defined
  function: it reads the structs' strings from Spark's internal rows, with no external ``Row`` of 46
  strings built per message;
- the Spark SQL text (:func:`findings_sql`, :func:`valid_sql`) is the reference it is tested against
  (same findings, order and texts, on every entry of the profile broken once and on a changed profile).
Both use Java's regular expressions (anchored with ``\\z`` because ``$`` would accept a trailing newline,
and ``(?s)`` so that ``.`` matches any character as in the profile, found as RLIKE finds), integers as
``DECIMAL(38,0)`` and floats as ``DOUBLE`` (try_cast). No Python UDF.
"""
from __future__ import annotations

from collections.abc import Callable
import json
from dataclasses import dataclass
from typing import Any, assert_never

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from interchange.ground.errors import CliError
from interchange.ground.profile import (
    TABLES,
    CancellationRule,
    CommaList,
    CrossRule,
    Kind,
    MessageType,
    NonEmpty,
    OneOf,
    Pattern,
    Property,
    PublicationIdRule,
    PublisherId,
    QuadTreeTiles,
    Range,
    ShardRule,
    Tables,
)
from spark.tables import PROPERTY_COLUMNS

#: The JSON kind (``standardKinds``) a value of each kind of the tables has in the log.
JSON_KINDS = {Kind.STRING: "string", Kind.INTEGER: "integer", Kind.FLOATING: "float"}
#: The messages table's columns of tables 1-7's values and JSON kinds, and of the other properties' values
#: (spark.tables.MESSAGES; null when no properties were logged). The checks read these three.
VALUES, KINDS, OTHERS = COLUMNS = PROPERTY_COLUMNS[:3]
#: The names of the other properties, in the order written (SQL).
OTHER_NAMES = f"map_keys({OTHERS})"

#: The class registering the Java function of the tables (spark/jvm/src/croads/validate/, the expression
#: TableChecks.java): (the values' and kinds' structs, the other names) -> what :func:`findings_sql` gives; and its
#: name in the session (:meth:`TableRules.register`).
FUNCTION_CLASS = "croads.validate.TableChecksUdf"
FUNCTION = "croads_table_findings"
#: The function's arguments (SQL).
FUNCTION_ARGUMENTS = f"{VALUES}, {KINDS}, {OTHER_NAMES}"

#: Spark SQL expression text.
Sql = str
#: A value check: the value's text -> [(bad, requirement, what is expected)], the first bad one wins.
ValueCheck = Callable[[Sql], list[tuple[Sql, str, str]]]


def _lit(text: str) -> Sql:
    """A SQL string literal of ``text`` (Spark's parser unescapes backslashes and quotes in literals)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _whole(regex: str) -> str:
    """A Java regular expression matching exactly what Python's ``re.fullmatch(regex, s, re.DOTALL)`` does."""
    return f"(?s)^(?:{regex})\\z"


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


def _matches(value: Sql, regex: str) -> Sql:
    return f"({value} RLIKE {_lit(regex)})"


# --- value rules ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ValueTest:
    """One test of a property's value: what makes it bad, the requirement it breaks and what is expected.

    ``kind``: nonEmpty, oneOf (``values``), floatRange / intRange (``low``-``high``, or ``also``),
    pattern (``regex`` found in the value, as RLIKE does), publisherId (``regex``, and the number of
    up to ``max_digits`` digits after ``letters`` letters at most ``high``). The SQL of :func:`_bad`
    and the Java function (:meth:`TableRules.function_spec`) evaluate the same test.
    """

    kind: str
    requirement: str
    expected: str
    regex: str | None = None
    values: tuple[str, ...] = ()
    low: int | float | None = None
    high: int | float | None = None
    also: int | None = None
    letters: int = 0
    max_digits: int = 0


def _bad(test: ValueTest, value: Sql) -> Sql:
    """The SQL that is true when ``value`` fails ``test`` (null is taken as false by its users)."""
    match test.kind:
        case "nonEmpty":
            return f"({value} = '')"
        case "oneOf":
            return _not(f"({value} IN ({', '.join(map(_lit, test.values))}))")
        case "floatRange":
            low, high = float(test.low or 0), float(test.high or 0)
            return f"coalesce(NOT (try_cast({value} AS DOUBLE) BETWEEN {low!r}D AND {high!r}D), true)"
        case "intRange":
            number = _number(value)
            inside = f"{number} BETWEEN {test.low} AND {test.high}"
            if test.also is not None:
                inside = _any(f"{number} = {test.also}", inside)
            return f"coalesce(NOT ({inside}), true)"
        case "pattern":
            return _not(_matches(value, test.regex or ""))
        case "publisherId":
            number = _number(f"substring({value}, {test.letters + 1}, {test.max_digits + 5})")
            return _any(_not(_matches(value, test.regex or "")), f"coalesce({number} > {test.high}, true)")
    raise ValueError(test.kind)


def _comma_list(rule: CommaList, requirement: str) -> ValueTest:
    # an item regex matches no ',' (the profile's lists split at every comma), so one pattern
    # checks the form and every item
    item = "[^,]+" if rule.item_regex is None else f"(?:{rule.item_regex})"
    return ValueTest("pattern", rule.requirement or requirement, rule.expected, regex=_whole(f",(?:{item},)+"))


def _value_tests(prop: Property) -> list[ValueTest]:
    """The tests of a property's value rule, in order (none: any value of its kind)."""
    rule, requirement = prop.rule, prop.requirement
    match rule:
        case None:
            return []
        case NonEmpty():
            return [ValueTest("nonEmpty", requirement, rule.expected)]
        case OneOf(values=values):
            return [ValueTest("oneOf", requirement, rule.expected, values=values)]
        case Range():
            kind = "floatRange" if prop.kind is Kind.FLOATING else "intRange"
            return [ValueTest(kind, requirement, rule.expected, low=rule.low, high=rule.high,
                              also=None if prop.kind is Kind.FLOATING else rule.also)]
        case Pattern(regex=regex):
            return [ValueTest("pattern", requirement, rule.expected, regex=_whole(regex))]
        case CommaList():
            return [_comma_list(rule, requirement)]
        case PublisherId():
            return [ValueTest("publisherId", requirement, rule.expected, regex=_whole(rule.regex), high=rule.max_number,
                              letters=rule.letters, max_digits=rule.max_digits)]
        case QuadTreeTiles():
            return [ValueTest("pattern", rule.form_requirement, rule.form_expected, regex=_whole(rule.form_regex)),
                    ValueTest("pattern", rule.zoom_requirement, rule.zoom_expected, regex=rule.reference_regex)]
        case _:
            assert_never(rule)


def _value_check(prop: Property) -> ValueCheck | None:
    """The SQL of a property's value rule (None: any value of its kind)."""
    tests = _value_tests(prop)
    if not tests:
        return None
    return lambda value: [(_bad(t, value), t.requirement, t.expected) for t in tests]


def _rule_requirements(rule: CrossRule) -> tuple[str, ...]:
    match rule:
        case PublicationIdRule() | CancellationRule():
            return (rule.requirement,)
        case ShardRule():
            return (rule.first_requirement, rule.count_requirement)
        case _:
            assert_never(rule)


#: What a mandatory property's absence expects.
EVERY_MESSAGE = "present (every C-ITS message)"


def _mandatory_for(message_type: str) -> str:
    return f"present (mandatory for {message_type})"


def _finding(name: str, requirement: str, observed: Sql, expected: str, rule_sql: Sql | None = None) -> Sql:
    """A finding; ``rule_sql``: the requirement as an expression (one that depends on the messageType)."""
    return (f"named_struct('property', {_lit(name)}, 'rule', {rule_sql or _lit(requirement)}, 'observed', {observed}, "
            f"'expected', {_lit(expected)})")


def _requirement_by_type(prop: Property, message_type: Sql) -> Sql | None:
    """The requirement of ``prop``'s problems as SQL when it depends on the messageType (None: it does not)."""
    if not prop.by_type:
        return None
    return "CASE " + " ".join(f"WHEN {message_type} IN ({', '.join(_lit(t.value) for t in types)}) THEN {_lit(r)}"
                              for types, r in prop.by_type) + f" ELSE {_lit(prop.requirement)} END"


def _test_spec(test: ValueTest, requirement: str) -> dict[str, object]:
    """A value test as the Java function reads it; ``own``: it breaks the property's own requirement (which may
    depend on the messageType)."""
    def number(x: float | None) -> str | None:  # the SQL's literals: a float's repr, an integer's digits
        return None if x is None else repr(float(x)) if test.kind == "floatRange" else str(x)
    return {"type": test.kind, "requirement": test.requirement, "expected": test.expected,
            "own": test.requirement == requirement, "regex": test.regex, "values": list(test.values),
            "low": number(test.low), "high": number(test.high), "also": number(test.also),
            "letters": test.letters, "maxDigits": test.max_digits}


class TableRules:
    """The SQL of one set of tables 1-7 (the module's functions are the profile's, :data:`RULES`)."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        #: name -> (JSON kind, requirement of its table, value check)
        self.spec: dict[str, tuple[str, str, ValueCheck | None]] = {
            p.name: (JSON_KINDS[p.kind], p.requirement, _value_check(p)) for p in tables.properties}
        self.expected_kind = {p.name: p.kind.value for p in tables.properties}
        #: (name, requirement) of the properties every C-ITS message carries
        self.mandatory_all = tuple((p.name, p.requirement) for p in tables.properties if p.mandatory.every_message)
        #: messageType -> (name, requirement) of the properties mandatory for it
        self.mandatory_by_type = {
            t.value: names for t in MessageType
            if (names := tuple((p.name, p.requirement) for p in tables.properties if t in p.mandatory.message_types))}
        self.custom_name = _whole(tables.custom_names.regex)
        #: Every requirement a finding can name (sorted).
        self.requirements: tuple[str, ...] = tuple(sorted(
            {p.requirement for p in tables.properties} | {r for p in tables.properties for _, r in p.by_type}
            | {requirement for _, _, check in self.spec.values() if check is not None for _, requirement, _ in check("v")}
            | {r for rule in tables.cross_rules for r in _rule_requirements(rule)} | {tables.custom_names.requirement}))

    def findings_sql(self) -> Sql:
        """array<struct<property, rule, observed, expected>>: every problem of one message's properties."""
        m = _Message(self.spec)
        message_type = _case((m.valid("messageType"), m.value("messageType")))
        items = [m.property_finding(p.name, self.expected_kind[p.name], _requirement_by_type(p, message_type))
                 for p in self.tables.properties]
        items += [_case((_not(m.present(name)), _finding(name, requirement, "'absent'", EVERY_MESSAGE)))
                  for name, requirement in self.mandatory_all]
        for type_name, names in self.mandatory_by_type.items():
            items += [_case((_all(f"({message_type} = {_lit(type_name)})", _not(m.present(name))),
                             _finding(name, requirement, "'absent'", _mandatory_for(type_name))))
                      for name, requirement in names]
        items += [finding for rule in self.tables.cross_rules for finding in _cross_findings(rule, m, message_type)]
        custom = self.tables.custom_names
        others = (f"transform(filter({OTHER_NAMES}, k -> NOT (k RLIKE {_lit(self.custom_name)})), k -> named_struct("
                  f"'property', k, 'rule', {_lit(custom.requirement)}, 'observed', k, 'expected', {_lit(custom.form)}))")
        return f"concat({others}, filter(array({', '.join(items)}), f -> f IS NOT NULL))"

    def valid_sql(self) -> Sql:
        """True exactly for a message :meth:`findings_sql` finds nothing in (the cheap test run on every message).

        Most messages are valid, so validate tests this first and builds findings only where it is
        false: each standard property absent or of its kind, every other name a custom one, then each
        value check only on the properties present and the checks across properties.
        """
        m = _Message(self.spec)
        value = m.value
        conditions = [f"forall({OTHER_NAMES}, k -> k RLIKE {_lit(self.custom_name)})"]
        conditions += [_any(f"{m.kind(name)} IS NULL", f"{m.kind(name)} = {_lit(kind)}")
                       for name, (kind, _, _) in self.spec.items()]
        conditions += [f"{value(name)} IS NOT NULL" for name, _ in self.mandatory_all]
        for name in self.spec:  # of its kind when present, so a null value is an absent one here
            conditions += [_any(f"{value(name)} IS NULL", _not(f"coalesce({bad}, false)")) for bad, _, _ in m.value_bad(name)]
        message_type = value("messageType")
        for type_name, names in self.mandatory_by_type.items():
            conditions.append(_any(_not(f"({message_type} = {_lit(type_name)})"),
                                   _all(*[f"{value(n)} IS NOT NULL" for n, _ in names])))
        conditions += [condition for rule in self.tables.cross_rules for condition in _cross_valid(rule, m)]
        return f"coalesce({_all(*conditions)}, false)"

    def function_spec(self) -> str:
        """The tables as the JSON the Java function reads (:func:`register`): every text a finding holds is here."""
        properties = [{"name": p.name, "kind": JSON_KINDS[p.kind], "requirement": p.requirement,
                       "expectedKind": p.kind.value,
                       "byType": [{"types": [t.value for t in types], "requirement": r} for types, r in p.by_type],
                       "tests": [_test_spec(t, p.requirement) for t in _value_tests(p)]}
                      for p in self.tables.properties]
        mandatory = [{"name": n, "requirement": r, "expected": EVERY_MESSAGE} for n, r in self.mandatory_all]
        mandatory += [{"messageType": t, "name": n, "requirement": r, "expected": _mandatory_for(t)}
                      for t, names in self.mandatory_by_type.items() for n, r in names]
        custom = self.tables.custom_names
        return json.dumps({"properties": properties, "messageType": "messageType", "mandatory": mandatory,
                           "cross": [_cross_spec(rule) for rule in self.tables.cross_rules],
                           "custom": {"regex": self.custom_name, "requirement": custom.requirement, "form": custom.form}})

    def register(self, spark: SparkSession, name: str = FUNCTION) -> None:
        """Registers the Java function of these tables as ``name`` in ``spark`` (again: replaced by the same)."""
        # PySpark has no public door to a JVM class's static method: py4j's gateway is it
        udf_class: Any = spark._jvm  # noqa: SLF001
        for part in FUNCTION_CLASS.split("."):
            udf_class = getattr(udf_class, part)
        try:
            udf_class.register(spark._jsparkSession, name, self.function_spec())  # noqa: SLF001
        except TypeError as error:  # py4j found a package, not the class: the jar is not on the class path
            raise CliError(f"the table checks ({FUNCTION_CLASS}) are not in this Spark session: build "
                           "spark/jvm/target/croads-ingest.jar with scripts/setup.sh and start the session with "
                           "spark.session.build_session (or give spark-submit the jar with --jars)") from error


class _Message:
    """SQL expressions over one message's properties (the typed columns of the messages table)."""

    def __init__(self, spec: dict[str, tuple[str, str, ValueCheck | None]]) -> None:
        self.spec = spec

    def value(self, name: str) -> Sql:
        return f"{VALUES}.`{name}`"

    def present(self, name: str) -> Sql:
        return f"({self.kind(name)} IS NOT NULL)"

    def kind(self, name: str) -> Sql:
        return f"{KINDS}.`{name}`"

    def kind_ok(self, name: str) -> Sql:
        return f"coalesce({self.kind(name)} = {_lit(self.spec[name][0])}, false)"

    def observed(self, name: str) -> Sql:
        return f"concat({_lit(name + '=')}, coalesce({self.value(name)}, 'null'))"

    def value_bad(self, name: str) -> list[tuple[Sql, str, str]]:
        check = self.spec[name][2]
        return [] if check is None else check(self.value(name))

    def valid(self, name: str) -> Sql:
        """Present, of its kind and passing its value check (validation.py's ``valid``)."""
        return _all(self.present(name), self.kind_ok(name),
                    *[_not(f"coalesce({bad}, false)") for bad, _, _ in self.value_bad(name)])

    def property_finding(self, name: str, expected_kind: str, by_type: Sql | None = None) -> Sql:
        """The first problem of one standard property (type, then value), as a finding or null;
        ``by_type``: its requirement as SQL where that depends on the messageType."""
        _, requirement, _ = self.spec[name]
        kind_text = f"coalesce({self.kind(name)}, '?')"
        branches = [(_all(self.present(name), _not(self.kind_ok(name))),
                     _finding(name, requirement, f"concat({_lit(name + ' is JSON ')}, {kind_text})", expected_kind,
                              by_type))]
        branches += [(_all(self.present(name), f"coalesce({bad}, false)"),
                      _finding(name, rule, self.observed(name), expected, by_type if rule == requirement else None))
                     for bad, rule, expected in self.value_bad(name)]
        return _case(*branches)


#: The profile's tables 1-7 as SQL.
RULES = TableRules(TABLES)
#: name -> (JSON kind, requirement of its table, value check): the profile's tables 1-7.
SPEC = RULES.spec
#: Every requirement a finding of the profile's tables can name (sorted).
REQUIREMENTS = RULES.requirements


def findings_sql() -> Sql:
    """array<struct<property, rule, observed, expected>>: every problem of one message's properties."""
    return RULES.findings_sql()


def findings() -> Column:
    """:func:`findings_sql` as a column."""
    return F.expr(findings_sql())


def valid_sql() -> Sql:
    """True exactly for a message :func:`findings` finds nothing in (see :meth:`TableRules.valid_sql`)."""
    return RULES.valid_sql()


def valid() -> Column:
    """:func:`valid_sql` as a column."""
    return F.expr(valid_sql())


# --- the rules across properties: the findings, and the conditions of valid_sql -----------------------

def _expected(rule: CrossRule) -> list[str]:
    """What a rule across properties expects, for each of its findings in order."""
    match rule:
        case PublicationIdRule():
            return [repr(rule.form), f"starts with the {rule.publisher}"]
        case CancellationRule():
            return [f"{rule.value} together with {rule.first} for a cancellation"]
        case ShardRule():
            return [f"present while {rule.shard_count} is set", f"{rule.first} or more", f"at most {rule.shard_count}"]
        case _:
            assert_never(rule)


def _cross_spec(rule: CrossRule) -> dict[str, object]:
    """A rule across properties as the Java function reads it (``first``/``second``: the properties it relates)."""
    match rule:
        case PublicationIdRule():
            fields: dict[str, object] = {"type": "publicationId", "first": rule.publication, "second": rule.publisher,
                                         "separator": rule.separator, "requirement": rule.requirement}
        case CancellationRule():
            fields = {"type": "cancellation", "messageType": rule.message_type.value, "first": rule.first,
                      "second": rule.second, "value": str(rule.value), "requirement": rule.requirement}
        case ShardRule():
            fields = {"type": "shard", "first": rule.shard_id, "second": rule.shard_count, "value": str(rule.first),
                      "requirement": rule.first_requirement, "otherRequirement": rule.count_requirement}
        case _:
            assert_never(rule)
    return {**fields, "expected": _expected(rule)}


def _cross_findings(rule: CrossRule, m: _Message, message_type: Sql) -> list[Sql]:
    match rule:
        case PublicationIdRule():
            return [_publication_id(rule, m)]
        case CancellationRule():
            return [_cancellation(rule, m, message_type)]
        case ShardRule():
            return _shards(rule, m)
        case _:
            assert_never(rule)


def _cross_valid(rule: CrossRule, m: _Message) -> list[Sql]:
    """Conditions that hold when ``rule`` finds nothing (given that every property is of its kind and valid)."""
    value = m.value
    match rule:
        case PublicationIdRule():
            publisher, publication = value(rule.publisher), value(rule.publication)
            return [_any(f"{publication} IS NULL",
                         _all(f"startswith({publication}, concat({publisher}, {_lit(rule.separator)}))",
                              f"length({publication}) > length({publisher}) + {len(rule.separator)}"))]
        case CancellationRule():
            cancelled = f"(({_number(value(rule.first))} = {rule.value}) = ({_number(value(rule.second))} = {rule.value}))"
            return [_any(_not(f"({value('messageType')} = {_lit(rule.message_type.value)})"),
                         f"coalesce({cancelled}, true)")]
        case ShardRule():
            shard_id, shard_count = _number(value(rule.shard_id)), _number(value(rule.shard_count))
            in_range = _all(f"{shard_id} >= {rule.first}", _any(f"{shard_count} IS NULL", f"{shard_id} <= {shard_count}"))
            return [_any(f"{value(rule.shard_count)} IS NULL", f"{value(rule.shard_id)} IS NOT NULL"),
                    _any(f"{value(rule.shard_id)} IS NULL", f"coalesce({in_range}, false)")]
        case _:
            assert_never(rule)


def _publication_id(rule: PublicationIdRule, m: _Message) -> Sql:
    name = rule.publication
    value = m.value(name)
    separator = _lit(rule.separator)
    at = f"instr({value}, {separator})"
    publisher = f"substring_index({value}, {separator}, 1)"
    local = f"substring({value}, {at} + {len(rule.separator)}, length({value}))"
    malformed = _any(f"{at} = 0", f"{publisher} = ''", f"{local} = ''")
    checked = m.valid(name)
    return _case((_all(checked, malformed), _finding(name, rule.requirement, m.observed(name), _expected(rule)[0])),
                 (_all(checked, m.valid(rule.publisher), _not(f"({publisher} = {m.value(rule.publisher)})")),
                  _finding(name, rule.requirement, m.observed(name), _expected(rule)[1])))


def _cancellation(rule: CancellationRule, m: _Message, message_type: Sql) -> Sql:
    first, second = _number(m.value(rule.first)), _number(m.value(rule.second))
    mismatch = _not(f"(({first} = {rule.value}) = ({second} = {rule.value}))")
    both = _all(f"({message_type} = {_lit(rule.message_type.value)})", m.valid(rule.first), m.valid(rule.second))
    return _case((_all(both, mismatch), _finding(rule.second, rule.requirement, m.observed(rule.second),
                                                 _expected(rule)[0])))


def _shards(rule: ShardRule, m: _Message) -> list[Sql]:
    id_name, count_name = rule.shard_id, rule.shard_count
    shard_id, shard_count = _number(m.value(id_name)), _number(m.value(count_name))
    id_valid, count_valid = m.valid(id_name), m.valid(count_name)
    missing = _case((_all(_not(id_valid), count_valid, _not(m.present(id_name))),
                     _finding(id_name, rule.count_requirement, "'absent'", _expected(rule)[0])))
    wrong = _case((_all(id_valid, f"({shard_id} < {rule.first})"),
                   _finding(id_name, rule.first_requirement, m.observed(id_name), _expected(rule)[1])),
                  (_all(id_valid, count_valid, f"({shard_id} > {shard_count})"),
                   _finding(id_name, rule.count_requirement, m.observed(id_name), _expected(rule)[2])))
    return [missing, wrong]
