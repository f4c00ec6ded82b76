"""What a delivery target accepts: messages that fit one of its actor's capabilities (IP_077), as
data the broker matches directly, not as selector text.

A capability's fit (Tables 11/12): equal strings for ``messageType``, ``publisherId``,
``publicationId``, ``originatingCountry``, ``protocolVersion``; ``quadTree`` containing ``,<tile>``;
``causeCode`` among the codes; ``shardId`` in 1..``shardCount`` (appendix G). The same terms as
:func:`ii_api.decisions.capability_selector.capability_selector` with :mod:`jms_selectors`'
semantics (``tests/integration/test_coverage.py``). The message's ``publicationId`` (IP_022) picks
the fits to check. Why data and not selector text: docs/broker.md ("Routing").
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CapabilityFit", "Coverage", "CoverageMatcher", "FIT_KEYS"]

#: The string properties a fit may fix (``publicationId`` is the index, listed apart).
FIT_KEYS = ("messageType", "publisherId", "originatingCountry", "protocolVersion")
#: From this many tiles a fit finds them by the message's tile prefixes (a set look-up per comma
#: and tile length) instead of one substring search per tile.
_TILE_SET_FROM = 8


class CapabilityFit(BaseModel):
    """The terms of capabilities alike but for their ``publicationId`` (see the module doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    publicationIds: tuple[str, ...] = Field(min_length=1)
    equal: dict[str, str] = Field(default_factory=dict, description="property -> value, keys among FIT_KEYS")
    tiles: tuple[str, ...] = Field(default=(), description="quadTree tiles; empty: no quadTree term")
    causeCodes: tuple[int, ...] = Field(default=(), description="DENM causeCode values; empty: no term")
    shardCount: int | None = Field(default=None, ge=1, description="shardId BETWEEN 1 AND shardCount")


class Coverage(BaseModel):
    """The capabilities a delivery target accepts messages of (a message fits one of them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fits: tuple[CapabilityFit, ...] = ()

    def publication_ids(self) -> set[str]:
        return {pid for fit in self.fits for pid in fit.publicationIds}


Check = Callable[[Mapping[str, object]], bool]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and type(value) is not bool


def _tile_check(tiles: tuple[str, ...]) -> Check:
    """``quadTree`` is a string holding ``,<tile>`` for one of ``tiles`` (exactly the JMS
    ``quadTree LIKE '%,<tile>%'``, OR'ed; tiles are digits, so LIKE is a substring search)."""
    needles = tuple("," + tile for tile in dict.fromkeys(tiles))
    if len(needles) < _TILE_SET_FROM:
        def few(properties: Mapping[str, object]) -> bool:
            value = properties.get("quadTree")
            if isinstance(value, str):
                for needle in needles:  # (a loop, not any() over a generator: this runs for every message)
                    if needle in value:
                        return True
            return False
        return few
    wanted = frozenset(tiles)
    lengths = tuple(sorted({len(tile) for tile in wanted}))

    def many(properties: Mapping[str, object]) -> bool:
        value = properties.get("quadTree")
        if not isinstance(value, str):
            return False
        start = value.find(",")
        while start >= 0:  # ",<tile>" starts at a comma: the characters after it begin with the tile
            for length in lengths:
                if value[start + 1:start + 1 + length] in wanted:
                    return True
            start = value.find(",", start + 1)
        return False
    return many


def _fit_check(fit: CapabilityFit) -> Check:
    """One function checking every term of ``fit`` but the publicationId (the index's)."""
    equal = tuple(fit.equal.items())
    tiles = _tile_check(fit.tiles) if fit.tiles else None
    codes = frozenset(fit.causeCodes)
    shards = fit.shardCount

    def check(properties: Mapping[str, object]) -> bool:
        for key, expected in equal:
            value = properties.get(key)
            if not (isinstance(value, str) and value == expected):
                return False
        if tiles is not None and not tiles(properties):
            return False
        if codes:
            cause = properties.get("causeCode")
            if not (_is_number(cause) and cause in codes):
                return False
        if shards is not None:
            shard = properties.get("shardId")
            if not (_is_number(shard) and 1 <= shard <= shards):  # type: ignore[operator]
                return False
        return True
    return check


class CoverageMatcher:
    """``matcher(properties)``: whether a message's application properties fit the coverage.
    Built once per version of a target; each call costs a look-up and the check of the fits
    sharing the message's publicationId. Never raises. Given the matcher of the target's previous
    version, it reuses the checks of the fits both share (the II changes a few of thousands)."""

    __slots__ = ("_by_publication", "_checks")

    def __init__(self, coverage: Coverage, previous: "CoverageMatcher | None" = None) -> None:
        known = previous._checks if previous is not None else {}  # noqa: SLF001
        #: by id(fit), the fit kept with its check: while a matcher holds its fits, no other object
        #: has their ids, so a fit found in ``known`` by id is that fit
        self._checks: dict[int, tuple[CapabilityFit, Check]] = {}
        by_publication: dict[str, list[Check]] = {}
        for fit in coverage.fits:
            entry = known.get(id(fit))
            if entry is None:
                entry = (fit, _fit_check(fit))
            self._checks[id(fit)] = entry
            for pid in dict.fromkeys(fit.publicationIds):
                by_publication.setdefault(pid, []).append(entry[1])
        self._by_publication = {pid: tuple(checks) for pid, checks in by_publication.items()}

    def __call__(self, properties: Mapping[str, object]) -> bool:
        try:
            pid = properties.get("publicationId")
            if not isinstance(pid, str):
                return False
            checks = self._by_publication.get(pid)
            if checks is not None:
                for check in checks:
                    if check(properties):
                        return True
            return False
        except Exception:  # noqa: BLE001 - a mapping that misbehaves: no match, as compiled selectors do
            return False

    def __len__(self) -> int:
        return len(self._by_publication)
