"""Authorization of local C-ITS actors (IP_068: the actor API rests on a bilateral agreement).

What an actor may do is this node's agreement with it, the ``[ii.actors]`` rules of the config:
the first rule whose ``cn`` (a CN or a ``*``/``?`` pattern) matches applies, ``"*"`` in a list
allows every value. Publishing (capabilities, deliveries) is checked on each capability's
``messageType`` and ``publisherId``; a subscription's selector must exclude every message type the
actor may not receive (decided as :mod:`ii_api.selectors.matching` decides overlaps). Without the
section every actor may do everything (the node logs a warning at start-up). Sans-I/O: each check
returns the refusal (reason and field) or None; the server answers 403 and logs it. The rules
explained: docs/improved-interface.md ("Local actors"); an example: docs/configuration.md.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ii_api.selectors.matching import CapabilityMatcher
from ii_api.wire.models import Capability, MessageType

__all__ = ["ActorPolicy", "ActorRule", "Refusal"]

ANY = "*"
MESSAGE_TYPES = tuple(t.value for t in MessageType)


@dataclass(frozen=True)
class Refusal:
    """Why an actor's request is refused (403), and the body field concerned if any."""

    reason: str
    field: str | None = None


def _allows(values: Sequence[str], value: str) -> bool:
    return ANY in values or value in values


class ActorRule(BaseModel):
    """What the actors whose CN matches ``cn`` may publish and subscribe to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cn: str = Field(min_length=1, description="a Common Name, or a pattern with * and ?")
    publish_message_types: tuple[str, ...] = ()
    publisher_ids: tuple[str, ...] = ()
    subscribe_message_types: tuple[str, ...] = ()

    @field_validator("publish_message_types", "subscribe_message_types")
    @classmethod
    def _known_types(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [v for v in values if v != ANY and v not in MESSAGE_TYPES]
        if unknown:
            raise ValueError(f"unknown message types {unknown}: use {', '.join(MESSAGE_TYPES)} or '*'")
        return values

    def names(self, cn: str) -> bool:
        return fnmatch.fnmatchcase(cn, self.cn)


class ActorPolicy(BaseModel):
    """The ``[ii.actors]`` section: rules, and what happens to an actor no rule names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: Literal["deny", "allow"] = "deny"
    rules: tuple[ActorRule, ...] = ()

    def rule(self, cn: str) -> ActorRule | None:
        """The rule for ``cn``: the first that names it; with ``default = "allow"``, one allowing all."""
        for rule in self.rules:
            if rule.names(cn):
                return rule
        if self.default == "allow":
            return ActorRule(cn=cn, publish_message_types=(ANY,), publisher_ids=(ANY,),
                             subscribe_message_types=(ANY,))
        return None

    def check_actor(self, cn: str) -> Refusal | None:
        """Whether ``cn`` is a local actor of this node at all."""
        if self.rule(cn) is None:
            return Refusal(f"{cn!r} is not a local actor of this interchange (no [ii.actors] rule names it)")
        return None

    def check_capabilities(self, cn: str, capabilities: Sequence[Capability]) -> Refusal | None:
        """Each capability's messageType and publisherId must be allowed to ``cn``."""
        rule = self.rule(cn)
        if rule is None:
            return self.check_actor(cn)
        for index, capability in enumerate(capabilities):
            app = capability.application
            if not _allows(rule.publish_message_types, app.messageType):
                return Refusal(f"{cn!r} may not publish {app.messageType}", f"capabilities.{index}.application.messageType")
            if not _allows(rule.publisher_ids, app.publisherId):
                return Refusal(f"{cn!r} may not publish as publisherId {app.publisherId!r}",
                               f"capabilities.{index}.application.publisherId")
        return None

    def check_publisher(self, cn: str) -> Refusal | None:
        """Deliveries: ``cn`` may publish something (what exactly is bounded by its capabilities)."""
        rule = self.rule(cn)
        if rule is None:
            return self.check_actor(cn)
        if not rule.publish_message_types or not rule.publisher_ids:
            return Refusal(f"{cn!r} may not publish on this interchange")
        return None

    def check_subscriptions(self, cn: str, selectors: Sequence[str]) -> Refusal | None:
        """Each selector must exclude the message types ``cn`` may not subscribe to. A selector
        that does not parse is left to the subscription's own NOT_VALID answer."""
        rule = self.rule(cn)
        if rule is None:
            return self.check_actor(cn)
        if ANY in rule.subscribe_message_types:
            return None
        forbidden = [t for t in MESSAGE_TYPES if t not in rule.subscribe_message_types]
        for index, selector in enumerate(selectors):
            try:
                matcher = CapabilityMatcher(selector)
            except ValueError:
                continue
            reaching = [t for t in forbidden if matcher.matches({"messageType": t})]
            if reaching:
                allowed = ", ".join(f"'{t}'" for t in rule.subscribe_message_types) or "none"
                return Refusal(f"{cn!r} may not subscribe to {', '.join(reaching)}: the selector must limit "
                               f"messageType to {allowed} (e.g. messageType IN ({allowed}) AND ...)",
                               f"subscriptions.{index}.selector")
        return None
