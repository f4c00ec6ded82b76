"""Selector/capability overlap and message/capability fit.

:func:`selector_matches_capability` decides whether a subscription selector can match ANY
message of a capability (the "matching capabilities" of IP_133/IP_134, NO_OVERLAP of Table 14):
JMS three-valued logic, and only a selector FALSE for every message the capability describes
rules it out; properties the capability does not describe are UNKNOWN, quadTree tiles are areas.
Exact where each property occurs in one leaf or scalar properties fit in :data:`MAX_COMBINATIONS`
joint assignments; otherwise conservative (a match no single message realises, never the reverse).
:func:`capability_matches_message` decides whether one message fits a capability (what a delivery
target accepts). The property table, semantics and algorithm: docs/selectors.md.
"""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard, Union

from jms_selectors import Selector, parse, reference
from jms_selectors.ast import And, Expr, Identifier, IsNull, Like, Not, Or, identifiers
from jms_selectors.like import LikePattern
from quadtree.property import parse_property

__all__ = [
    "MAX_COMBINATIONS", "CapabilityMatcher", "Domain", "Shape", "capability_domains", "capability_matches_message",
    "selector_matches_capability",
]

#: Most answers a matcher remembers (by the domains of the properties its selector names).
MAX_REMEMBERED = 4096
#: Most joint assignments of repeated scalar properties enumerated per capability.
MAX_COMBINATIONS = 4096
#: Most value combinations evaluated for one leaf mentioning several properties.
MAX_LEAF_COMBINATIONS = 4096
#: Largest shardCount whose shardId values are enumerated (beyond: shardId is UNKNOWN).
MAX_SHARDS = 4096

Truths = frozenset  # of True / False / None (unknown)
_T: Truths = frozenset({True})
_F: Truths = frozenset({False})
_U: Truths = frozenset({None})
_TF: Truths = frozenset({True, False})

_IDENTITY = ("messageType", "publisherId", "publicationId", "originatingCountry", "protocolVersion")
_INT_SETS = {"causeCode": ("causeCode",), "stationType": ("stationType", "stationTypes")}
_TOKEN_LISTS = {"iviType": "iviType", "pictogramCategoryCode": "pictogramCategoryCode", "id": "ids"}
_DIGITS = frozenset("0123")


# ---------------------------------------------------------------------------------- domains
@dataclass(frozen=True)
class Scalar:
    """The property holds exactly one of ``values``."""

    values: tuple[Any, ...]


@dataclass(frozen=True)
class Areas:
    """``quadTree``: a comma list of tiles, each inside (or equal to) one of ``tiles``."""

    tiles: tuple[str, ...]


@dataclass(frozen=True)
class Tokens:
    """A comma-list property holding a non-empty subset of ``tokens``."""

    tokens: tuple[str, ...]


Domain = Union[Scalar, Areas, Tokens]


class Shape:
    """A capability's domains but its publicationId, hashed once: capabilities alike in everything
    but their publicationId (thousands of one actor's) share one, and a matcher decides once per
    shape. A matcher looks only at the properties its selector names:
    :meth:`project` gives the shape of those, kept, so that capabilities differing elsewhere (a
    tile of their own each) share that answer too."""

    __slots__ = ("items", "_hash", "_projections")

    def __init__(self, domains: Mapping[str, Domain]) -> None:
        self.items = tuple(sorted((k, v) for k, v in domains.items() if k != "publicationId"))
        self._hash = hash(self.items)
        self._projections: dict[frozenset[str], Shape] = {}

    def project(self, names: frozenset[str]) -> "Shape":
        """The shape of the domains of ``names`` only (made once per set of names)."""
        projection = self._projections.get(names)
        if projection is None:
            projection = self._projections[names] = Shape({k: v for k, v in self.items if k in names})
        return projection

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and self._hash == other._hash and self.items == other.items


def _as_mapping(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if hasattr(value, "model_dump"):  # a pydantic model of ii_api.wire.models
        return value.model_dump(mode="json")
    if not isinstance(value, Mapping):
        raise TypeError(f"a capability application must be a mapping, not {type(value).__name__}")
    return value


def _unique(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(value: Any) -> tuple[str, ...] | None:
    items = value if isinstance(value, list) else [value]
    if items and all(isinstance(v, str) for v in items):
        return _unique(items)
    return None


def _ints(value: Any) -> tuple[int, ...] | None:
    items = value if isinstance(value, list) else [value]
    if items and all(_is_int(v) for v in items):
        return _unique(int(v) for v in items)
    return None


def _tokens(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not value:
        return None
    texts = [str(int(v)) if _is_int(v) else v for v in value]
    if all(isinstance(t, str) and t and "," not in t for t in texts):
        return _unique(texts)
    return None


def _is_tile(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and set(value) <= _DIGITS


def _tiles(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):  # the message form ",t1,t2,", tolerated
        try:
            value = parse_property(value)
        except ValueError:
            return None
    if isinstance(value, list) and value and all(_is_tile(t) for t in value):
        return _unique(value)
    return None


def _shard_count(application: Mapping[str, Any], metadata: Mapping[str, Any]) -> int | None:
    for source in (metadata, application):
        count = source.get("shardCount")
        if _is_int(count) and count >= 1:
            return int(count)
    return None


def capability_domains(application: Any, metadata: Any = None) -> dict[str, Domain]:
    """The message property values a capability describes (absent key: UNKNOWN)."""
    app, meta = _as_mapping(application), _as_mapping(metadata)
    domains: dict[str, Domain] = {}
    for key in _IDENTITY:
        values = _strings(app.get(key))
        if values is not None:
            domains[key] = Scalar(values)
    for prop, keys in _INT_SETS.items():
        for key in keys:
            ints = _ints(app.get(key))
            if ints is not None:
                domains[prop] = Scalar(ints)
                break
    tiles = _tiles(app.get("quadTree"))
    if tiles is not None:
        domains["quadTree"] = Areas(tiles)
    for prop, key in _TOKEN_LISTS.items():
        tokens = _tokens(app.get(key))
        if tokens is not None:
            domains[prop] = Tokens(tokens)
    shards = _shard_count(app, meta)
    if shards is not None:
        domains["shardCount"] = Scalar((shards,))
        if shards <= MAX_SHARDS:
            domains["shardId"] = Scalar(tuple(range(1, shards + 1)))
    return domains


# ------------------------------------------------------------------------- truth-value sets
def _not(values: Truths) -> Truths:
    return frozenset(None if v is None else not v for v in values)


def _and2(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or2(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _combine(op: Callable[[bool | None, bool | None], bool | None], left: Truths, right: Truths) -> Truths:
    return frozenset(op(a, b) for a in left for b in right)


def _negated(values: Truths, negated: bool) -> Truths:
    return _not(values) if negated else values


def _matches_no_quadtree(matcher: LikePattern) -> bool:
    """Whether no well-formed quadTree value can match: it is ``",t1,t2,"`` (IP_037/038), digits 0-3
    and commas only, a comma at each end, so e.g. ``'%,0313'`` or ``'%,03x%'`` selects nothing."""
    if matcher.kind not in ("exact", "prefix", "suffix", "contains"):
        return False
    literal = matcher.literal
    return (not set(literal) <= _DIGITS | {","}
            or (matcher.kind in ("exact", "prefix") and not literal.startswith(","))
            or (matcher.kind in ("exact", "suffix") and not literal.endswith(",")))


def _area_like(matcher: LikePattern, tiles: tuple[str, ...]) -> Truths:
    """Truths of ``quadTree LIKE pattern`` over messages whose tiles lie in ``tiles``."""
    if matcher.kind == "any":
        return _T
    if _matches_no_quadtree(matcher):
        return _F
    if matcher.kind not in ("contains", "prefix", "exact", "suffix") or not matcher.literal.startswith(","):
        return _U
    body = matcher.literal[1:]
    whole_tile = body.endswith(",")
    if whole_tile:
        body = body[:-1]
    if not set(body) <= _DIGITS or (whole_tile and not body) or (matcher.kind in ("exact", "suffix") and not whole_tile):
        return _U
    result: set[bool] = set()
    for cap in tiles:
        if whole_tile:  # a (any, first or last) message tile equal to `body`: only where body lies inside cap
            result |= _TF if body.startswith(cap) else _F
        elif cap.startswith(body):  # cap inside body: every message tile matches
            result.add(True)
        elif body.startswith(cap):  # body strictly inside cap: some do, some don't
            result |= _TF
        else:
            result.add(False)
    return frozenset(result)


def _token_like(matcher: LikePattern, tokens: tuple[str, ...]) -> Truths:
    """Truths of ``prop LIKE pattern`` over comma lists of subsets of ``tokens``.

    For the shapes handled a message's result equals that of one of its own values alone
    (any value for ``%..%``, its first for ``,..%``, its last for ``%..,``, its only one for
    ``,..,``), so the union over single values is exact. Other shapes: UNKNOWN.
    """
    kind, lit = matcher.kind, matcher.literal
    if kind == "any":
        return _T
    if lit == ",":  # every well-formed list starts and ends with a comma, and is never ","
        return _F if kind == "exact" else _T
    lead = lit.startswith(",") if kind in ("contains", "suffix") else True
    trail = lit.endswith(",") if kind in ("contains", "prefix") else True
    if kind in ("prefix", "exact") and not lit.startswith(","):
        return _U
    if kind in ("suffix", "exact") and not lit.endswith(","):
        return _U
    core = lit[1 if lead else 0:]
    core = core[:-1] if trail and core else core
    if kind not in ("contains", "prefix", "suffix", "exact") or "," in core:
        return _U
    if lead and trail:
        return frozenset(t == core for t in tokens)
    if lead:
        return frozenset(t.startswith(core) for t in tokens)
    if trail:
        return frozenset(t.endswith(core) for t in tokens)
    return frozenset(core in t for t in tokens)


def _multi_valued_leaf(leaf: Expr, name: str, domain: Areas | Tokens) -> Truths:
    if isinstance(leaf, IsNull) and leaf.subject == Identifier(name):
        return _T if leaf.negated else _F  # the property is present
    if isinstance(leaf, Like) and leaf.subject == Identifier(name):
        matcher = leaf.matcher
        if isinstance(domain, Areas):
            truths = _area_like(matcher, domain.tiles)
        else:
            truths = _token_like(matcher, domain.tokens)
        return _negated(truths, leaf.negated)
    return _U


# ----------------------------------------------------------------------------- the matcher
def _leaves(root: Expr) -> list[Expr]:
    """Conditions below the AND/OR/NOT skeleton, in tree order (iterative)."""
    found: list[Expr] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, (And, Or)):
            stack.extend(reversed(node.operands))
        elif isinstance(node, Not):
            stack.append(node.operand)
        else:
            found.append(node)
    return found


class CapabilityMatcher:
    """A selector parsed once, checked against many capabilities.

    ``CapabilityMatcher(text).matches(application, metadata=None) -> bool``; the constructor
    raises :class:`jms_selectors.SelectorError` for an invalid selector (callers answer
    NOT_VALID).
    """

    def __init__(self, selector: str | Selector) -> None:
        self.ast: Expr = selector.ast if isinstance(selector, Selector) else parse(selector)
        self._leaves = _leaves(self.ast)
        self._names = {id(leaf): identifiers(leaf) for leaf in self._leaves}
        counts = Counter(name for leaf in self._leaves for name in self._names[id(leaf)])
        self._repeated = frozenset(name for name, count in counts.items() if count > 1)
        self._mentioned = tuple(sorted(counts))
        self._names_publication = "publicationId" in counts
        self._named = frozenset(counts)  #: the answer depends on the domains of these only
        #: answers by the domains of the properties the selector names: capabilities alike in
        #: those (thousands of one actor, differing in publicationId) are decided once
        self._answers: dict[Any, bool] = {}

    def matches(self, application: Any, metadata: Any = None, *, domains: Mapping[str, Domain] | None = None,
                shape: Shape | None = None) -> bool:
        """True if the selector is TRUE or UNKNOWN for some message of the capability.

        ``domains``: the capability's :func:`capability_domains`, and ``shape`` its :class:`Shape`,
        when the caller keeps them (they cost more than the match itself;
        ``models.Capability.domains`` and ``.shape`` compute them once)."""
        if domains is None:
            domains = capability_domains(application, metadata)
        key: Any
        if shape is not None:
            projected = shape.project(self._named)
            key = (projected, domains.get("publicationId")) if self._names_publication else projected
        else:
            key = tuple((name, domains.get(name)) for name in self._mentioned)
        answer = self._answers.get(key)
        if answer is None:
            if len(self._answers) >= MAX_REMEMBERED:
                self._answers.clear()
            answer = self._answers[key] = self._decide(domains)
        return answer

    def _decide(self, domains: Mapping[str, Domain]) -> bool:
        enumerated = self._enumerated(domains)
        constant = {
            id(leaf): self._leaf(leaf, domains, {})
            for leaf in self._leaves
            if not (self._names[id(leaf)] & enumerated.keys())
        }
        names = list(enumerated)
        for values in itertools.product(*(enumerated[n] for n in names)):
            fixed = dict(zip(names, values))
            truths = dict(constant)
            for leaf in self._leaves:
                if id(leaf) not in truths:
                    truths[id(leaf)] = self._leaf(leaf, domains, fixed)
            if _keeps(self._evaluate(self.ast, truths)):
                return True
        return False

    def _enumerated(self, domains: Mapping[str, Domain]) -> dict[str, tuple[Any, ...]]:
        """Repeated scalar properties to enumerate jointly, smallest first, within the cap."""
        candidates = sorted(
            (name for name in self._repeated
             if isinstance(domains.get(name), Scalar) and len(domains[name].values) > 1),  # type: ignore[union-attr]
            key=lambda n: (len(domains[n].values), n),  # type: ignore[union-attr]
        )
        chosen: dict[str, tuple[Any, ...]] = {}
        total = 1
        for name in candidates:
            values = domains[name].values  # type: ignore[union-attr]
            if total * len(values) > MAX_COMBINATIONS:
                break
            total *= len(values)
            chosen[name] = values
        return chosen

    def _leaf(self, leaf: Expr, domains: Mapping[str, Domain], fixed: Mapping[str, Any]) -> Truths:
        names = sorted(self._names[id(leaf)])
        choices: list[tuple[Any, ...]] = []
        for name in names:
            if name in fixed:
                choices.append((fixed[name],))
                continue
            domain = domains.get(name)
            if domain is None:
                return _U  # not described by the capability
            if not isinstance(domain, Scalar):
                return _multi_valued_leaf(leaf, name, domain) if len(names) == 1 else _U
            choices.append(domain.values)
        size = 1
        for values in choices:
            size *= len(values)
        if size > MAX_LEAF_COMBINATIONS:
            return _U
        seen: set[bool | None] = set()
        for values in itertools.product(*choices):
            seen.add(reference.evaluate(leaf, dict(zip(names, values))))
            if len(seen) == 3:
                break
        return frozenset(seen)

    def _evaluate(self, node: Expr, truths: Mapping[int, Truths]) -> Truths:
        if isinstance(node, Not):
            return _not(self._evaluate(node.operand, truths))
        if isinstance(node, And):
            result = _T
            for operand in node.operands:
                result = _combine(_and2, result, self._evaluate(operand, truths))
                if result == _F:
                    break
            return result
        if isinstance(node, Or):
            result = _F
            for operand in node.operands:
                result = _combine(_or2, result, self._evaluate(operand, truths))
                if result == _T:
                    break
            return result
        return truths[id(node)]


def _keeps(truths: Truths) -> bool:
    return True in truths or None in truths


def selector_matches_capability(selector: str, application: Mapping, *, metadata: Mapping | None = None) -> bool:
    """Can ``selector`` match ANY message of the capability whose Table 11 ``application`` is given?

    TRUE or UNKNOWN for some message keeps the capability; properties the capability does not
    describe are UNKNOWN. ``metadata`` (Table 12) adds ``shardCount``/``shardId``. Raises
    :class:`jms_selectors.SelectorError` for an invalid selector (NOT_VALID).
    """
    return CapabilityMatcher(selector).matches(application, metadata)


# ---------------------------------------------------------------------- message fit (delivery)
def capability_matches_message(application: Mapping, properties: Mapping, *, metadata: Mapping | None = None) -> bool:
    """Does a message (its AMQP application properties) fit the capability?

    Enforced, each only when the capability gives it: ``messageType``, ``publisherId``,
    ``publicationId``, ``originatingCountry`` and ``protocolVersion`` equal; ``quadTree``: the
    message property is well formed and at least one of its tiles lies inside (or equals) a
    capability tile; DENM ``causeCode``: the message's is one of the listed ones (when the
    list is not empty/null); ``shardCount`` in ``metadata`` (appendix G): ``shardId`` is an
    integer in 1..shardCount. Nothing else is checked here (mandatory-property validation of
    messages is the broker's own, IP_022).
    """
    app, meta = _as_mapping(application), _as_mapping(metadata)
    for key in _IDENTITY:
        expected = app.get(key)
        if isinstance(expected, str):
            actual = properties.get(key)
            if not isinstance(actual, str) or actual != expected:
                return False
    tiles = _tiles(app.get("quadTree"))
    if tiles is not None:
        try:
            message_tiles = parse_property(properties.get("quadTree"))
        except ValueError:
            return False
        if not any(tile.startswith(cap) for tile in message_tiles for cap in tiles):
            return False
    if app.get("messageType") == "DENM":
        codes = _ints(app.get("causeCode")) if app.get("causeCode") else None
        if codes is not None:
            cause = properties.get("causeCode")
            if not _is_int(cause) or int(cause) not in codes:
                return False
    shards = _shard_count({}, meta)
    if shards is not None:
        shard_id = properties.get("shardId")
        if not _is_int(shard_id) or not 1 <= shard_id <= shards:
            return False
    return True
