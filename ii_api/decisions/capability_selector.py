"""JMS selectors built from capabilities, for the broker (sans-I/O).

- :func:`capability_selector`: the *validating selector* of one capability (Table 11/12): a
  message fits it exactly when :func:`ii_api.selectors.matching.capability_matches_message` says so.
  An actor's delivery target (``TargetSpec.selector``) is the OR of the selectors of the
  capabilities the delivery covers, so the broker accepts on it only what fits them (IP_077).
- :func:`granted_selector`: a neighbour subscription's source selector restricted to the
  publicationIds granted to it (IP_134; a capability that appears later needs RESUBSCRIBE).

Terms (each only when the capability gives the property): ``messageType``, ``publisherId``,
``publicationId``, ``originatingCountry``, ``protocolVersion`` equal; ``quadTree``: one
``quadTree LIKE '%,<tile>%'`` per capability tile, ORed (a message tile lies inside a capability
tile exactly when the message's ``,t1,t2,`` list contains ``,<tile>`` at a tile start); DENM
``causeCode``: one of the listed codes; ``metadata.shardCount`` n: ``shardId BETWEEN 1 AND n``.
"""
from __future__ import annotations

from collections.abc import Iterable

from ii_api.wire.models import Capability
from jms_selectors import embeddable

__all__ = ["capabilities_selector", "capability_selector", "granted_selector", "quote"]

_IDENTITY = ("messageType", "publisherId", "publicationId", "originatingCountry", "protocolVersion")
_IDENTITY_BUT_PUBLICATION = tuple(key for key in _IDENTITY if key != "publicationId")


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


def capabilities_selector(capabilities: Iterable[Capability]) -> str:
    """A message fits any of ``capabilities`` (``FALSE`` when there are none).

    Capabilities alike but for their publicationId share one alternative,
    ``publicationId IN (...) AND <the rest>``: an actor's thousands of capabilities usually come
    in a few shapes, and the selector stays small enough to compile quickly (issue 10; a plain OR
    of 300 capabilities already passed the 64 KiB selector bound)."""
    groups: dict[str, list[str]] = {}
    for capability in capabilities:
        rest = " AND ".join(_terms(capability, _IDENTITY_BUT_PUBLICATION))
        groups.setdefault(rest, []).append(capability.application.publicationId)
    parts = []
    for rest, ids in groups.items():
        unique = list(dict.fromkeys(ids))
        publication = (f"publicationId = {quote(unique[0])}" if len(unique) == 1
                       else f"publicationId IN ({', '.join(quote(i) for i in unique)})")
        parts.append(f"{publication} AND {rest}" if rest else publication)
    if not parts:
        return "FALSE"
    if len(parts) == 1:
        return parts[0]
    return " OR ".join(f"({p})" for p in parts)


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
