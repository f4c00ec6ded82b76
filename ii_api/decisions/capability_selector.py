"""What the broker enforces, built from capabilities (sans-I/O).

- :func:`capability_selector`: the *validating selector* of one capability (Table 11/12): a
  message fits it exactly when :func:`ii_api.selectors.matching.capability_matches_message` says so.
- :class:`Covering` (:func:`capabilities_coverage` at once): the same terms for many capabilities
  as data (:class:`~interchange.broker.coverage.Coverage`), kept up to date capability by
  capability: a delivery target accepts only what fits the capabilities its delivery covers
  (IP_077), whatever their number (no selector text that grows with them).
- :func:`granted_selector`: a neighbour subscription's source selector restricted to the
  publicationIds granted to it (IP_134; a capability that appears later needs RESUBSCRIBE).
The terms: docs/improved-interface.md ("Deliveries").
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ii_api.decisions.slices import Steps, run_to_end
from ii_api.wire.models import Capability
from interchange.broker.coverage import FIT_KEYS, CapabilityFit, Coverage
from jms_selectors import embeddable

__all__ = ["Covering", "capabilities_coverage", "capability_selector", "granted_selector", "quote"]

_IDENTITY = ("messageType", "publisherId", "publicationId", "originatingCountry", "protocolVersion")


def quote(value: str) -> str:
    """A JMS string literal (``'`` doubled)."""
    return "'" + value.replace("'", "''") + "'"


def _terms(capability: Capability, identity: tuple[str, ...]) -> list[str]:
    """The ANDed terms of a capability's selector, for the ``identity`` properties it gives."""
    app = capability.application
    terms = [f"{key} = {quote(getattr(app, key))}" for key in identity if isinstance(getattr(app, key, None), str)]
    tiles = list(dict.fromkeys(app.quadTree))
    if tiles:
        likes = [f"quadTree LIKE '%,{tile}%'" for tile in tiles]
        terms.append(likes[0] if len(likes) == 1 else "(" + " OR ".join(likes) + ")")
    if app.messageType == "DENM":
        codes = list(dict.fromkeys(getattr(app, "causeCode", None) or ()))
        if codes:
            equals = [f"causeCode = {code}" for code in codes]
            terms.append(equals[0] if len(equals) == 1 else "(" + " OR ".join(equals) + ")")
    shards = capability.metadata.shardCount
    if shards is not None:
        terms.append(f"shardId BETWEEN 1 AND {shards}")
    return terms


def capability_selector(capability: Capability) -> str:
    """The selector a message must match to fit ``capability``."""
    terms = _terms(capability, _IDENTITY)
    return " AND ".join(terms) if terms else "TRUE"


FitTerms = tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[int, ...], "int | None"]


def _fit_terms(capability: Capability) -> FitTerms:
    """A capability's terms but its publicationId, as :func:`_terms` writes them (hashable)."""
    app = capability.application
    equal = tuple((key, value) for key in FIT_KEYS if isinstance(value := getattr(app, key, None), str))
    codes: tuple[int, ...] = ()
    if app.messageType == "DENM":
        codes = tuple(dict.fromkeys(getattr(app, "causeCode", None) or ()))
    return equal, tuple(dict.fromkeys(app.quadTree)), codes, capability.metadata.shardCount


class Covering:
    """The capabilities one delivery target accepts, grouped into fits of capabilities alike but for
    their publicationId: a change rebuilds the fits it touches only, so an actor replacing some of
    its thousands of capabilities costs what it replaces, not what it holds."""

    def __init__(self) -> None:
        self._covered: Counter[tuple[str, FitTerms]] = Counter()  #: (publicationId, terms) -> capabilities
        self._groups: dict[FitTerms, dict[str, None]] = {}  #: terms -> publicationIds, in order
        self._fits: dict[FitTerms, CapabilityFit] = {}  #: made, and still right
        self._dirty: set[FitTerms] = set()  #: groups whose fit is to be made
        self._shards: Counter[int | None] = Counter()  #: the covered capabilities' shardCounts
        self._coverage: Coverage | None = None

    def __len__(self) -> int:
        return self._covered.total()

    def add(self, capability: Capability) -> None:
        """Cover ``capability`` too."""
        pid, terms = capability.application.publicationId, _fit_terms(capability)
        self._covered[(pid, terms)] += 1
        self._groups.setdefault(terms, {})[pid] = None
        self._changed(terms, 1)

    def remove(self, capability: Capability) -> bool:
        """No longer cover ``capability``; whether it was covered."""
        pid, terms = capability.application.publicationId, _fit_terms(capability)
        key = (pid, terms)
        if not self._covered[key]:
            return False
        self._covered[key] -= 1
        if not self._covered[key]:
            del self._covered[key]
            group = self._groups[terms]
            del group[pid]
            if not group:
                del self._groups[terms]
        self._changed(terms, -1)
        return True

    def _changed(self, terms: FitTerms, count: int) -> None:
        self._fits.pop(terms, None)
        self._dirty.add(terms)
        self._shards[terms[3]] += count
        if not self._shards[terms[3]]:
            del self._shards[terms[3]]
        self._coverage = None

    def prepare(self) -> Steps[None]:
        """Make the fits changes left to make (yields every few hundred: thousands take tens of ms)."""
        for index, terms in enumerate(list(self._dirty)):
            self._dirty.discard(terms)
            ids = self._groups.get(terms)
            if ids is not None:
                equal, tiles, codes, shards = terms
                self._fits[terms] = CapabilityFit(publicationIds=tuple(ids), equal=dict(equal), tiles=tiles,
                                                  causeCodes=codes, shardCount=shards)
            if index % 256 == 255:
                yield

    def coverage(self) -> Coverage:
        """What fits any covered capability: the terms of each one's :func:`capability_selector`."""
        if self._coverage is None:
            run_to_end(self.prepare())
            self._coverage = Coverage.model_construct(fits=tuple(self._fits.values()))
        return self._coverage

    @property
    def shard_count(self) -> int | None:
        """The covered capabilities' shardCount, when they all give the same one."""
        return next(iter(self._shards)) if len(self._shards) == 1 else None


def capabilities_coverage(capabilities: Iterable[Capability]) -> Coverage:
    """What fits any of ``capabilities`` (nothing when there are none)."""
    covering = Covering()
    for capability in capabilities:
        covering.add(capability)
    return covering.coverage()


def granted_selector(selector: str, publication_ids: Iterable[str]) -> str:
    """``selector`` restricted to messages of the granted capabilities (``FALSE`` for none).

    The selector is closed on its own line so that a trailing ``-- comment`` in it cannot
    swallow the restriction; a ``--`` that no line break follows in it (two minus signs, as the
    Java engines read it) is written apart first, so that the line break keeps its meaning.
    """
    ids = sorted(set(publication_ids))
    restriction = f"publicationId IN ({', '.join(quote(i) for i in ids)})" if ids else "FALSE"
    if not selector.strip():
        return restriction
    return f"({embeddable(selector)}\n) AND {restriction}"
