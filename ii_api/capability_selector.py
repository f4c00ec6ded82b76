"""JMS selectors built from capabilities, for the broker (sans-I/O).

- :func:`capability_selector`: the *validating selector* of one capability (Table 11/12): a
  message fits it exactly when :func:`ii_api.matching.capability_matches_message` says so.
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

from ii_api.models import Capability

__all__ = ["capabilities_selector", "capability_selector", "granted_selector", "quote"]

_IDENTITY = ("messageType", "publisherId", "publicationId", "originatingCountry", "protocolVersion")


def quote(value: str) -> str:
    """A JMS string literal (``'`` doubled)."""
    return "'" + value.replace("'", "''") + "'"


def capability_selector(capability: Capability) -> str:
    """The selector a message must match to fit ``capability``."""
    app = capability.application
    terms = [f"{key} = {quote(getattr(app, key))}" for key in _IDENTITY if isinstance(getattr(app, key, None), str)]
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
    return " AND ".join(terms) if terms else "TRUE"


def capabilities_selector(capabilities: Iterable[Capability]) -> str:
    """A message fits any of ``capabilities`` (``FALSE`` when there are none)."""
    parts = [capability_selector(c) for c in capabilities]
    if not parts:
        return "FALSE"
    if len(parts) == 1:
        return parts[0]
    return " OR ".join(f"({p})" for p in parts)


def granted_selector(selector: str, publication_ids: Iterable[str]) -> str:
    """``selector`` restricted to messages of the granted capabilities (``FALSE`` for none).

    The selector is closed on its own line so that a trailing ``-- comment`` in it cannot
    swallow the restriction.
    """
    ids = sorted(set(publication_ids))
    restriction = f"publicationId IN ({', '.join(quote(i) for i in ids)})" if ids else "FALSE"
    if not selector.strip():
        return restriction
    return f"({selector}\n) AND {restriction}"
