"""IF2 binding keys <-> equivalent JMS selectors on C-Roads properties (sans-I/O).

IF2 6.4 topic patterns (``*`` one word, ``#`` zero or more) and IP_066/067 selectors; both
directions are exact for messages with one location. :func:`binding_selector` always exists (a
binding key that matches nothing because of an unknown provider is an error);
:func:`selector_bindings` only for selectors built from what a routing key carries (OR / AND /
``IN`` of ``=`` on ``messageType``, ``protocolVersion``, ``publisherId``, DENM ``causeCode``,
``custom-intercor-if2-subtype``, and ``quadTree LIKE '%,<digits and _>%'`` to zoom 18), else
:class:`~.keys.If2KeyError` says which part. The position -> property table and why other
selectors have no binding key: docs/if2-bridge.md ("Binding keys <-> selectors").
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from interchange.bridges.if2.keys import (
    DEFAULT_SUBTYPE,
    HEADER_WORDS,
    IF2_TO_CROADS,
    KEY_WORDS,
    ROUTING_ZOOM,
    SUBTYPE_PROPERTY,
    If2KeyError,
    ProviderTable,
    check_subtype,
    dotted_version,
    version_word,
)
from jms_selectors import SelectorError, ast, parse

__all__ = ["MAX_EXPANSIONS", "binding_selector", "bindings_selector", "selector_bindings"]

#: Bounds on the positional patterns one binding key expands to (several '#' multiply them) and on
#: the distinct alternatives of its selector (beyond them the selector would be huge: an error).
MAX_EXPANSIONS = 4096
MAX_ALTERNATIVES = 64
#: Bound on the conjunctions a selector expands to (each becomes one binding key).
MAX_BINDINGS = 256
_FIELDS = ("type", "version", "provider", "subtype")
Slot = str | None  # a literal word, or None for any one word
_SUBTYPE = f'"{SUBTYPE_PROPERTY}"'  # a quoted identifier: the name has '-' (IP_131)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _words(binding: str) -> list[str]:
    if not isinstance(binding, str) or not binding:
        raise If2KeyError("empty binding key")
    words = binding.split(".")
    for word in words:
        if word in ("*", "#"):
            continue
        if not word or "*" in word or "#" in word:
            raise If2KeyError(f"binding key {binding!r}: {word!r} is not a word, '*' or '#' "
                              "(a wildcard is a whole word)")
    return words


def _expansions(words: list[str]) -> Iterator[tuple[Slot, ...]]:
    """The 22-slot positional patterns a binding key matches (``#`` -> 0..n ``None``)."""
    collapsed: list[str] = []
    for group_is_wild, group in itertools.groupby(words, key=lambda w: w in ("*", "#")):
        run = list(group)
        if group_is_wild and "#" in run:  # a run of '*' and '#' is its '*'s then one '#'
            run = ["*"] * run.count("*") + ["#"]
        collapsed.extend(run)
    hashes = [i for i, w in enumerate(collapsed) if w == "#"]
    slack = KEY_WORDS - (len(collapsed) - len(hashes))
    if slack < 0:
        return
    if hashes and math.comb(slack + len(hashes) - 1, len(hashes) - 1) > MAX_EXPANSIONS:
        raise If2KeyError(f"binding key {'.'.join(words)!r} has too many '#' to translate")
    if not hashes:
        if slack == 0:
            yield tuple(None if w == "*" else w for w in collapsed)
        return
    for cuts in itertools.combinations(range(slack + len(hashes) - 1), len(hashes) - 1):
        sizes = [b - a - 1 for a, b in zip((-1, *cuts), (*cuts, slack + len(hashes) - 1))]
        slots: list[Slot] = []
        counts = iter(sizes)
        for word in collapsed:
            slots.extend([None] * next(counts) if word == "#" else [None if word == "*" else word])
        yield tuple(slots)


def _tile_like(slots: tuple[Slot, ...]) -> str | None:
    """``quadTree LIKE`` term of the quadtree slots, '' for none, None if no key has them."""
    pattern = "".join("_" if s is None else s for s in slots).rstrip("_")
    if any(c not in "0123_" for c in pattern) or any(s is not None and len(s) != 1 for s in slots):
        return None
    return f"quadTree LIKE '%,{pattern}%'" if pattern else ""


def _terms(exchange: str, slots: tuple[Slot, ...], providers: ProviderTable) -> list[str] | None:
    """The conjunction for one positional pattern; None when it can match no IF2 key."""
    croads = IF2_TO_CROADS[exchange]
    kind, version, provider, subtype = slots[:HEADER_WORDS]
    terms: list[str] = []
    if kind is not None and kind != exchange:
        return None
    if version is not None:
        try:
            terms.append(f"protocolVersion = {_quote(f'{croads}:{dotted_version(version)}')}")
        except If2KeyError:
            return None
    if provider is not None:
        if provider not in providers.publisher_ids:
            return None
        terms.append(f"publisherId = {_quote(providers.publisher_id(provider))}")
    if subtype is not None:
        try:
            check_subtype(exchange, subtype)
        except If2KeyError:
            return None
        if exchange == "DENM":
            terms.append(f"causeCode = {int(subtype)}")
        elif subtype == DEFAULT_SUBTYPE:
            terms.append(f"({_SUBTYPE} = '{subtype}' OR {_SUBTYPE} IS NULL)")
        else:
            terms.append(f"{_SUBTYPE} = {_quote(subtype)}")
    like = _tile_like(slots[HEADER_WORDS:])
    if like is None:
        return None
    if like:
        terms.append(like)
    return terms


def binding_selector(exchange: str, binding: str, providers: ProviderTable) -> str:
    """The JMS selector that matches exactly the C-Roads messages whose IF2 routing key on
    ``exchange`` matches ``binding``."""
    if exchange not in IF2_TO_CROADS:
        raise If2KeyError(f"exchange {exchange!r} is not an IF2 exchange ({', '.join(IF2_TO_CROADS)})")
    conjunctions: list[list[str]] = []
    for slots in dict.fromkeys(_expansions(_words(binding))):
        terms = _terms(exchange, slots, providers)
        if terms is not None and terms not in conjunctions:
            conjunctions.append(terms)
            if len(conjunctions) > MAX_ALTERNATIVES:
                raise If2KeyError(f"binding key {binding!r} has too many '#' to translate: its selector would "
                                  f"need more than {MAX_ALTERNATIVES} alternatives")
    head = f"messageType = '{IF2_TO_CROADS[exchange]}'"
    if not conjunctions:
        unknown = [w for w in _words(binding) if w not in ("*", "#") and w not in providers.publisher_ids]
        if any(s[2] in unknown for s in _expansions(_words(binding))):  # likely a typo: say so
            raise If2KeyError(f"binding key {binding!r} matches nothing: provider "
                              f"{next(s[2] for s in _expansions(_words(binding)) if s[2] in unknown)!r} "
                              "is not in the provider table")
        return "FALSE"
    if [] in conjunctions:
        return head
    alternatives = [" AND ".join(t) for t in conjunctions]
    if len(alternatives) == 1:
        return f"{head} AND {alternatives[0]}"
    return f"{head} AND (" + " OR ".join(f"({a})" for a in alternatives) + ")"


def bindings_selector(bindings: dict[str, list[str]], providers: ProviderTable) -> str:
    """One selector for several exchanges' binding keys (``FALSE`` for none)."""
    parts = [binding_selector(exchange, key, providers) for exchange, keys in bindings.items() for key in keys]
    parts = [p for p in dict.fromkeys(parts) if p != "FALSE"]
    if not parts:
        return "FALSE"
    return parts[0] if len(parts) == 1 else " OR ".join(f"({p})" for p in parts)


# ------------------------------------------------------------------------ selector -> binding keys
@dataclass(frozen=True)
class _Word:
    """One routing-key position fixed by a selector term."""

    position: int  # 0..3: type, version, provider, subtype; 4..21: quadtree digits
    value: str


def _no_equivalent(why: str) -> If2KeyError:
    return If2KeyError(f"no IF2 binding key is equivalent: {why}")


def _equality(name: str, value: object, providers: ProviderTable) -> list[_Word]:
    """The routing-key words ``name = value`` fixes."""
    match name:
        case "messageType":
            croads_to_if2 = {v: k for k, v in IF2_TO_CROADS.items()}
            if not isinstance(value, str) or value not in croads_to_if2:
                raise _no_equivalent(f"messageType {value!r} has no IF2 exchange")
            return [_Word(0, croads_to_if2[value])]
        case "protocolVersion":
            if not isinstance(value, str) or ":" not in value:
                raise _no_equivalent(f"protocolVersion {value!r} is not '<messageType>:<version>'")
            croads, version = value.split(":", 1)
            return _equality("messageType", croads, providers) + [_Word(1, version_word(version))]
        case "publisherId":
            return [_Word(2, providers.provider(str(value)))]
        case "causeCode":
            if isinstance(value, bool) or not isinstance(value, int):
                raise _no_equivalent(f"causeCode {value!r} is not an integer")
            return [_Word(0, "DENM"), _Word(3, str(value))]
        case _ if name == SUBTYPE_PROPERTY:
            if not isinstance(value, str):
                raise _no_equivalent(f"{SUBTYPE_PROPERTY} {value!r} is not a string")
            if value == DEFAULT_SUBTYPE:  # the key's subtype 0 also stands for "no subtype property"
                raise _no_equivalent(f"subtype {DEFAULT_SUBTYPE} is also published for messages without "
                                     f"{SUBTYPE_PROPERTY}: write ({_SUBTYPE} = '0' OR {_SUBTYPE} IS NULL)")
            return [_Word(3, value)]
    raise _no_equivalent(f"{name!r} is not carried in the routing key")


def _like_words(pattern: str, escape: str | None) -> list[_Word]:
    body = pattern[2:-1] if pattern.startswith("%,") and pattern.endswith("%") else None
    if escape is not None or body is None or any(c not in "0123_" for c in body):
        raise _no_equivalent(f"quadTree LIKE {pattern!r} is not '%,<tile digits or _>%' "
                             "(a key anchors digits at tile positions)")
    if len(body) > ROUTING_ZOOM:
        raise _no_equivalent(f"quadTree LIKE {pattern!r} is deeper than zoom {ROUTING_ZOOM}, where keys stop")
    return [_Word(HEADER_WORDS + i, c) for i, c in enumerate(body) if c != "_"]


def _identifier_and_literal(node: ast.Comparison) -> tuple[str, object]:
    left, right = node.left, node.right
    if isinstance(right, ast.Identifier) and isinstance(left, ast.Literal):
        left, right = right, left
    if node.op != "=" or not isinstance(left, ast.Identifier) or not isinstance(right, ast.Literal):
        raise _no_equivalent(f"'{ast.unparse(node)}' is not '<property> = <value>' (topic matching "
                             "compares words for equality only)")
    return left.name, right.value


Conjunction = tuple[_Word, ...]
#: What a non-DENM subtype 0 means on the C-Roads side (see :func:`binding_selector`).
_DEFAULT_SUBTYPE_TERM = parse(f"{_SUBTYPE} = '{DEFAULT_SUBTYPE}' OR {_SUBTYPE} IS NULL")


def _dnf(node: ast.Expr, providers: ProviderTable) -> list[Conjunction]:
    """Disjunctive normal form of the supported selector subset."""
    if node == _DEFAULT_SUBTYPE_TERM:
        return [(_Word(3, DEFAULT_SUBTYPE),)]
    if isinstance(node, ast.Or):
        return [c for operand in node.operands for c in _dnf(operand, providers)]
    if isinstance(node, ast.And):
        result: list[Conjunction] = [()]
        for operand in node.operands:
            result = [a + b for a in result for b in _dnf(operand, providers)]
            if len(result) > MAX_BINDINGS:
                raise _no_equivalent(f"it expands to more than {MAX_BINDINGS} binding keys")
        return result
    if isinstance(node, ast.Literal) and node.value is True:
        return [()]
    if isinstance(node, ast.Comparison):
        return [tuple(_equality(*_identifier_and_literal(node), providers))]
    if isinstance(node, ast.In) and not node.negated and isinstance(node.subject, ast.Identifier):
        name = node.subject.name
        return [tuple(_equality(name, value, providers)) for value in node.values]
    if (isinstance(node, ast.Like) and not node.negated and isinstance(node.subject, ast.Identifier)
            and node.subject.name == "quadTree"):
        return [tuple(_like_words(node.pattern, node.escape))]
    raise _no_equivalent(f"'{ast.unparse(node)}' (only =, IN and quadTree LIKE '%,<tile>%' on the "
                         "properties a routing key carries, joined by AND / OR)")


def _binding(words: Conjunction) -> tuple[str, str] | None:
    """(exchange, binding key) for one conjunction; None if its terms contradict each other."""
    slots: dict[int, str] = {}
    for word in words:
        if slots.setdefault(word.position, word.value) != word.value:
            return None
    if slots.get(3) is not None and slots.get(0) == "DENM":
        try:
            check_subtype("DENM", slots[3])
        except If2KeyError:
            return None
    exchanges = [slots[0]] if 0 in slots else list(IF2_TO_CROADS)
    if len(exchanges) != 1:
        raise _no_equivalent("it does not fix messageType, and a binding key belongs to one exchange "
                             "(add messageType = ...)")
    last = max(slots)
    key = [slots.get(i, "*") for i in range(last + 1)]
    if last < KEY_WORDS - 1:
        key.append("#")
    while len(key) >= 3 and key[-1] == "#" and key[-2] == "*":  # all keys have 22 words: *.# is #
        del key[-2]
    if key == [exchanges[0], "#"]:  # the exchange holds only its own type (the bridge checks it)
        key = ["#"]
    return exchanges[0], ".".join(key)


def selector_bindings(selector: str, providers: ProviderTable) -> dict[str, list[str]]:
    """The IF2 binding keys, per exchange, equivalent to ``selector``."""
    try:
        tree = parse(selector)
    except SelectorError as exc:
        raise If2KeyError(f"selector: {exc}") from None
    result: dict[str, list[str]] = {}
    for conjunction in _dnf(tree, providers):
        found = _binding(conjunction)
        if found is not None and found[1] not in result.setdefault(found[0], []):
            result[found[0]].append(found[1])
    return {exchange: keys for exchange, keys in result.items() if keys}
