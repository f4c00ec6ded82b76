"""Every audit check cites the requirement whose sentence says what it tests (the sentences are the
profile's, interchange/ground/profile/requirements.py), and the README's rule list is the code's.

A check outside tables 1-7 carries the words of its requirement it tests (``Check.quote``); a table
check names the requirement of the property's table for the message's type, whose sentence names
that table ("Table 5" for the id of an SREM); the value rules and rules across properties name the
requirement whose sentence words them. A mutant citing the IVIM requirement for a Table 4 list, the
old citation, is refused.
"""
from __future__ import annotations

import dataclasses
import re

from pyspark.sql import SparkSession

from interchange.ground import profile
from interchange.ground.profile import (
    CancellationRule,
    CommaList,
    MessageType,
    Property,
    PublicationIdRule,
    QuadTreeTiles,
    ShardRule,
)
from spark import property_rules, rules
from interchange.testing.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_every_check_cites_the_requirement_that_words_it(spark: SparkSession) -> None:
    cited = []
    for rule in rules.ALL_RULES:
        for check in rule.checks():
            if check.check == "properties":
                continue
            (requirement,) = check.metric_rules
            assert check.quote, f"{check.check}: no words of {requirement} given"
            assert check.quote in rules.REQUIREMENTS[requirement], (check.check, requirement, check.quote)
            cited.append((requirement, check.check))
    assert sorted(cited) == sorted((rule, check) for check, (rule, _) in rules.CHECKS.items())


def _tables_of(prop: Property, message_type: MessageType) -> set[int]:
    """The tables that give ``prop`` to messages of ``message_type`` (all of its tables when none does)."""
    return (set(profile.MESSAGE_TYPES[message_type].tables) & set(prop.tables)) or set(prop.tables)


def table_citations(properties: tuple[Property, ...]) -> list[str]:
    """What is wrong with the requirements ``properties`` cite (empty: each sentence names its table)."""
    wrong = []
    for prop in properties:
        for message_type in MessageType:
            requirement = prop.requirement_for(message_type.value)
            rule = prop.rule
            if isinstance(rule, CommaList) and rule.requirement is not None:
                requirement = rule.requirement
            if not any(f"Table {n}" in profile.REQUIREMENTS[requirement] for n in _tables_of(prop, message_type)):
                wrong.append(f"{prop.name} in {message_type.value}: {requirement} names none of tables "
                             f"{sorted(_tables_of(prop, message_type))}")
    return wrong


def test_table_checks_cite_the_requirement_of_their_table() -> None:
    assert table_citations(profile.PROPERTIES) == []
    # the old citations: a Table 4/5 list under IP_029 (the IVIM requirement), an SREM's id under IP_100
    as_ivim = tuple(dataclasses.replace(p, rule=CommaList(requirement="IP_029")) if p.name == "id" else p
                    for p in profile.PROPERTIES)
    assert any(line.startswith("id in SPATEM: IP_029") for line in table_citations(as_ivim))
    one_table = tuple(dataclasses.replace(p, by_type=()) if p.name == "id" else p for p in profile.PROPERTIES)
    assert table_citations(one_table) == ["id in SREM: IP_100 names none of tables [5]",
                                          "id in SSEM: IP_100 names none of tables [5]"]


def test_value_rules_and_rules_across_properties_cite_their_words() -> None:
    sentences = profile.REQUIREMENTS
    for prop in profile.PROPERTIES:
        if isinstance(prop.rule, QuadTreeTiles):
            assert "quadtree" in sentences[prop.rule.form_requirement]
            assert f"zoom level of {prop.rule.reference_zoom}" in sentences[prop.rule.zoom_requirement]
    for cross in profile.CROSS_RULES:
        match cross:
            case PublicationIdRule():
                assert "Table 1" in sentences[cross.requirement]
            case CancellationRule():
                assert "Table 2" in sentences[cross.requirement]
            case ShardRule():
                assert "shardId" in sentences[cross.first_requirement]
                assert f"{cross.shard_id} <= {cross.shard_count}" in sentences[cross.count_requirement]
    assert "custom-<" in sentences[profile.CUSTOM_NAMES.requirement]


def readme_rules() -> set[tuple[str, str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = text[text.index("<!-- audit-rules"):text.index("<!-- /audit-rules -->")]
    return {(m[1], m[2]) for m in re.finditer(r"^\s*\| (IP_\d{3}|AUDIT) \| (\w+) \|", listed, re.MULTILINE)}


def test_the_readme_lists_the_rules_of_the_code() -> None:
    code = {(rule, check) for check, (rule, _) in rules.CHECKS.items()}
    code |= {(requirement, "properties") for requirement in property_rules.REQUIREMENTS}
    assert readme_rules() == code
