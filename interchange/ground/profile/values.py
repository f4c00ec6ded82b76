"""The kinds of value a property of tables 1-7 has, and the rules its value obeys, as data.

A :data:`ValueRule` says what a value must be, never how to check it: the broker's validation
turns each into a Python check (and the header of its C accelerator), the audit into Spark SQL,
the II into a JSON Schema fragment. ``expected`` is the text every reader uses to say what was
expected ("2 uppercase letters and a number 0-16383 (ISO 14816)").

Regular expressions here are matched against the whole value, ``.`` matching any character (line
breaks too), and use only the syntax Python's ``re`` and Java's ``java.util.regex`` read alike
(classes, ``{m,n}``, ``?``, ``+``, ``(?:)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["CommaList", "Kind", "NonEmpty", "OneOf", "Pattern", "PublisherId", "QuadTreeTiles", "Range", "ValueRule"]


class Kind(Enum):
    """The type a table gives a property; the value is what a problem says was expected."""

    STRING = "a string"
    INTEGER = "an integer"
    FLOATING = "a float or double"


@dataclass(frozen=True, slots=True)
class NonEmpty:
    """A string that is not empty (Table 1: protocolVersion, baselineVersion)."""

    @property
    def expected(self) -> str:
        return "not empty"


@dataclass(frozen=True, slots=True)
class OneOf:
    """One of the listed strings, exactly (case matters)."""

    values: tuple[str, ...]

    @property
    def expected(self) -> str:
        if len(self.values) == 2:
            return f"{self.values[0]!r} or {self.values[1]!r}"
        return "one of " + ", ".join(sorted(self.values))


@dataclass(frozen=True, slots=True)
class Range:
    """``low`` to ``high`` inclusive (floats for a floating property: NaN is outside), or ``also``
    (e.g. -1, which Table 2 sets for a cancellation)."""

    low: int | float
    high: int | float
    also: int | None = None
    also_meaning: str = ""  #: what ``also`` stands for, e.g. "a cancellation"

    @property
    def expected(self) -> str:
        text = f"{self.low} to {self.high}"
        return text if self.also is None else f"{text}, or {self.also} for {self.also_meaning}"


@dataclass(frozen=True, slots=True)
class Pattern:
    """The whole value matches ``regex``; ``meaning`` says it in words."""

    regex: str
    meaning: str

    @property
    def expected(self) -> str:
        return self.meaning


@dataclass(frozen=True, slots=True)
class CommaList:
    """A comma separated list starting and ending with a comma, ``",a,b,"``, no empty item
    (``",-1,"`` stands for "not present"); with ``item_regex``, each item matches it. The tables
    give this form to serviceType (Table 1), the IVIM fields (Table 3, IP_029) and id/name (Tables
    4 and 5): a value not of it breaks the requirement of the property's table (``requirement``
    None), or ``requirement`` when given."""

    item_regex: str | None = None
    items: str = ""  #: what the items are, in words ("integers")
    example: str = ",a,b,"  #: a list of such items
    short_example: str = ",a,b,"  #: the shape alone, for a value that is no list at all
    requirement: str | None = None  #: None: the requirement of the property's table

    @property
    def expected(self) -> str:
        if self.item_regex is None:
            return f"a comma separated list like {self.example!r}"
        return f"a comma separated list of {self.items} like {self.example!r}"


@dataclass(frozen=True, slots=True)
class PublisherId:
    """Table 1, IP_031: ``letters`` uppercase letters (the country, ISO 3166-1 alpha-2) and a number
    0-``max_number`` of 1-``max_digits`` digits, leading zeros allowed (ISO 14816), e.g. "DE15608"."""

    letters: int = 2
    max_digits: int = 5
    max_number: int = 16383

    @property
    def regex(self) -> str:
        """The form (the number's bound is checked apart); its one group is the number."""
        return f"[A-Z]{{{self.letters}}}([0-9]{{1,{self.max_digits}}})"

    @property
    def expected(self) -> str:
        return f"{self.letters} uppercase letters and a number 0-{self.max_number} (ISO 14816)"


@dataclass(frozen=True, slots=True)
class QuadTreeTiles:
    """IP_037: ``",t1,t2,"``, tiles of the digits 0-3 (appendix A); IP_038: at least one tile of
    ``reference_zoom`` digits or more (the message's reference location)."""

    reference_zoom: int
    form_requirement: str = "IP_037"
    zoom_requirement: str = "IP_038"

    @property
    def form_regex(self) -> str:
        return ",(?:[0-3]+,)+"

    @property
    def reference_regex(self) -> str:
        """Found anywhere in a well-formed value when a tile is deep enough."""
        return f",[0-3]{{{self.reference_zoom}}}"

    @property
    def form_expected(self) -> str:
        return "',t1,t2,' with tiles of the digits 0-3"

    @property
    def zoom_expected(self) -> str:
        return f"a tile of zoom level {self.reference_zoom} or more"

    @property
    def expected(self) -> str:
        return f"{self.form_expected}, {self.zoom_expected}"


#: Every kind of value rule; a reader handles each (its ``match`` ends in ``assert_never``).
ValueRule = NonEmpty | OneOf | Range | Pattern | CommaList | PublisherId | QuadTreeTiles
