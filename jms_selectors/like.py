"""LIKE pattern matching in linear-ish time (IP_066: ``quadTree LIKE '%,<tile>%'`` filters).

``%`` any run, ``_`` one code point, case-sensitive; ``ESCAPE 'c'`` makes ``c%``, ``c_``, ``cc``
literal and any other escape an error (SQL-92). No backtracking regex: the pattern is split at
``%`` into fixed-length segments matched leftmost, so a match costs at most
O(len(value) * len(pattern)); :attr:`LikePattern.kind` names the shapes the compiler inlines.
Why the greedy choice is right: docs/selectors.md ("LIKE matching").
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

_ONE = object()  # placeholder for "_" while parsing
_RUN = object()  # placeholder for "%"


class LikePatternError(ValueError):
    """A malformed pattern or escape; ``offset`` indexes the decoded pattern (or is None)."""

    def __init__(self, reason: str, offset: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset


@dataclass(frozen=True)
class LikePattern:
    """A compiled LIKE pattern; call :meth:`matches` with a ``str``.

    ``kind`` is one of ``exact``, ``prefix``, ``suffix``, ``contains``, ``any`` or
    ``general``; for the first four ``literal`` is the text to compare with.
    """

    pattern: str
    escape: str | None
    kind: str
    literal: str
    matches: Callable[[str], bool] = field(repr=False, compare=False)


def _items(pattern: str, escape: str | None) -> list[object]:
    if escape is not None and len(escape) != 1:
        raise LikePatternError(f"ESCAPE must be a single character, got {len(escape)} characters")
    items: list[object] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == escape:
            if i + 1 >= n:
                raise LikePatternError(f"LIKE pattern ends with the escape character {escape!r}", i)
            following = pattern[i + 1]
            if following not in ("%", "_", escape):
                raise LikePatternError(
                    f"invalid escape sequence {escape + following!r} in LIKE pattern: "
                    f"the escape character may only precede '%', '_' or itself",
                    i,
                )
            items.append(following)
            i += 2
            continue
        items.append(_RUN if c == "%" else _ONE if c == "_" else c)
        i += 1
    return items


def _segment(items: list[object]) -> tuple[str | re.Pattern[str], int]:
    """A fixed-length segment (plain text, or a regex of single-character items) and its length."""
    if all(isinstance(x, str) for x in items):
        return "".join(items), len(items)  # type: ignore[arg-type]
    # a segment holds characters (str) and _ONE, never _RUN
    source = "".join("." if x is _ONE else re.escape(cast(str, x)) for x in items)
    return re.compile(source, re.DOTALL), len(items)


def _at(segment: str | re.Pattern[str], s: str, i: int) -> bool:
    if isinstance(segment, str):
        return s.startswith(segment, i)
    return segment.match(s, i) is not None


def _find(segment: str | re.Pattern[str], s: str, start: int, end: int) -> int:
    if isinstance(segment, str):
        return s.find(segment, start, end)
    found = segment.search(s, start, end)
    return -1 if found is None else found.start()


def _general(compiled: list[tuple[str | re.Pattern[str], int]]) -> Callable[[str], bool]:
    segments = [seg for seg, _ in compiled]
    lengths = [size for _, size in compiled]
    if len(segments) == 1:
        (only,), (size,) = segments, lengths

        def exact(s: str) -> bool:
            return len(s) == size and _at(only, s, 0)

        return exact
    first, last, middle = segments[0], segments[-1], list(zip(segments[1:-1], lengths[1:-1]))
    first_len, last_len, minimum = lengths[0], lengths[-1], sum(lengths)

    def general(s: str) -> bool:
        n = len(s)
        if n < minimum or not _at(first, s, 0):
            return False
        end = n - last_len
        if not _at(last, s, end):
            return False
        pos = first_len
        for seg, size in middle:
            found = _find(seg, s, pos, end)
            if found < 0:
                return False
            pos = found + size
        return True

    return general


def compile_like(pattern: str, escape: str | None = None) -> LikePattern:
    """Compile ``pattern`` (LikePatternError if it or ``escape`` is malformed)."""
    items = _items(pattern, escape)
    groups: list[list[object]] = [[]]
    for item in items:
        if item is _RUN:
            groups.append([])
        else:
            groups[-1].append(item)
    # Empty segments between two % (from '%%') match trivially: drop them.
    groups = [groups[0], *(g for g in groups[1:-1] if g), groups[-1]] if len(groups) > 1 else groups
    compiled = [_segment(g) for g in groups]
    segments = [seg for seg, _ in compiled]
    plain = all(isinstance(seg, str) for seg in segments)
    if plain and len(segments) == 1:
        only = segments[0]
        return _make(pattern, escape, "exact", only, lambda s, lit=only: s == lit)  # type: ignore[misc]
    if plain and len(segments) == 2:
        first, last = segments
        if not first and not last:
            return _make(pattern, escape, "any", "", lambda s: True)
        if not last:
            return _make(pattern, escape, "prefix", first, lambda s, lit=first: s.startswith(lit))  # type: ignore[misc]
        if not first:
            return _make(pattern, escape, "suffix", last, lambda s, lit=last: s.endswith(lit))  # type: ignore[misc]
    if plain and len(segments) == 3 and not segments[0] and not segments[2]:
        middle = segments[1]
        return _make(pattern, escape, "contains", middle, lambda s, lit=middle: lit in s)  # type: ignore[misc]
    return _make(pattern, escape, "general", "", _general(compiled))


def _make(pattern: str, escape: str | None, kind: str, literal: object, matches: Callable[[str], bool]) -> LikePattern:
    return LikePattern(pattern, escape, kind, str(literal), matches)


def contains_any(literals: list[str]) -> Callable[[str], object]:
    """``search(s)``: not None iff ``s`` contains one of the non-empty ``literals``.

    Used for ``q LIKE '%,t1%' OR q LIKE '%,t2%' OR ...`` (IP_066 quadTree filters): one scan
    of the value instead of one per tile. The pattern is a plain alternation of escaped
    literals; ``re`` factors out their common prefix and scans for it, and without quantifiers
    a search costs at most O(len(s) * total literal length).
    """
    return re.compile("|".join(re.escape(literal) for literal in sorted(set(literals)))).search
