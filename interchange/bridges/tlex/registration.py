"""The bridge as a C-ITS actor of its node: what it registers through the local actor API, with the
actors' toolkit (:class:`interchange.actor.ActorApi`).

- capabilities: one per controller and message type, kept in sync (missing posted in batches
  within ``[ii.limits]``, moved replaced, removed withdrawn after the new ones are in);
- its delivery: one, ``publisherId = '<publisherId>'``;
- SREM subscriptions covering the bridged intersections (missing made, unneeded terminated).

A refusal is a :class:`BridgeSetupError` with the node's reason. docs/tlex-bridge.md ("The bridge
as a C-ITS actor").
"""
from __future__ import annotations

import asyncio
from pathlib import Path

from ii_api.wire.models import Capability, LocalCapability
from interchange.actor import ActorApi, ActorError, ActorSettings
from interchange.bridges.tlex.limits import ActorLimits, batches
from interchange.bridges.tlex.publication import SREM_SELECTOR_HEAD, Translator
from certs.tls import TlsFiles

__all__ = ["BridgeSetupError", "Registration"]
TIMEOUT_S = 60.0  #: one request: thousands of capabilities take the node a while


class BridgeSetupError(RuntimeError):
    """The node refused something the bridge needs (capability, delivery, subscription)."""


class Registration:
    """The bridge's capabilities, delivery and SREM subscriptions at its node."""

    def __init__(self, files: TlsFiles, *, node_name: str, ii_url: str, limits: ActorLimits, publisher_id: str) -> None:
        self.settings = ActorSettings(node=node_name, ii_url=ii_url, cert_chain=files.cert_chain, key=files.key,
                                      trust_bundle=files.trust_bundle, crls=tuple(Path(p) for p in files.crls),
                                      timeout_s=TIMEOUT_S)
        self._limits, self._publisher_id = limits, publisher_id

    async def register(self, translator: Translator) -> tuple[str, list[str]]:
        """Everything at start: the delivery's target and the SREM subscriptions' sources."""
        async with ActorApi(self.settings) as api:
            try:
                await self._sync_capabilities(api, translator)
                target = await self._delivery(api)
                return target, await self._sync_srem_subscriptions(api, translator)
            except ActorError as exc:
                raise BridgeSetupError(str(exc)) from None

    async def update(self, translator: Translator) -> list[str]:
        """Controllers changed at run time: capabilities and SREM subscriptions follow; the sources."""
        async with ActorApi(self.settings) as api:
            try:
                await self._sync_capabilities(api, translator)
                return await self._sync_srem_subscriptions(api, translator)
            except ActorError as exc:
                raise BridgeSetupError(str(exc)) from None

    async def _sync_capabilities(self, api: ActorApi, translator: Translator) -> None:
        existing = await api.capabilities()
        # thousands of capabilities to build and compare: not on the event loop
        wanted, current, stale = await asyncio.to_thread(_compare, translator, existing)
        replaced = [c for c in stale if str(c.definition.application.publicationId) in wanted]
        for capability in replaced:  # a moved controller: same publicationId, new definition
            await api.delete_capability(capability.id)
        missing = [c for key, c in wanted.items() if key not in current]
        limits = self._limits
        for batch in batches(missing, "capabilities", limits.capabilities_per_request, limits.capabilities_body_bytes,
                             as_json=Capability.to_json):
            await api.add_capabilities(batch)
        gone = {capability.id for capability in replaced}
        for capability in stale:  # withdrawn after the new ones are in: the delivery keeps an overlap
            if capability.id not in gone:
                await api.delete_capability(capability.id)

    async def _delivery(self, api: ActorApi) -> str:
        selector = f"publisherId = '{self._publisher_id}'"
        delivery = next((d for d in await api.deliveries() if d.selector == selector and d.endpoints), None)
        if delivery is None:
            delivery = await api.wait_delivery(await api.create_delivery(selector), timeout_s=TIMEOUT_S)
        if not delivery.endpoints:
            raise BridgeSetupError(f"delivery {delivery.id} has no target: {delivery.status.value} "
                                   f"{delivery.errorMessage or ''}".strip())
        return str(delivery.endpoints[0].target)

    async def _sync_srem_subscriptions(self, api: ActorApi, translator: Translator) -> list[str]:
        subscriptions = await api.subscriptions()
        selectors = translator.srem_selectors(self._limits.srem_selector_length)
        made = {s.selector: s for s in subscriptions if s.endpoints}
        missing = [selector for selector in selectors if selector not in made]
        for batch in batches(missing, "subscriptions", self._limits.subscriptions_per_request):
            for sub in await api.create_subscriptions(batch):
                if not sub.endpoints:
                    raise BridgeSetupError(f"SREM subscription {sub.id} has no source: {sub.status.value} "
                                           f"{sub.errorMessage or ''}".strip())
                made[sub.selector] = sub
        wanted = set(selectors)
        for sub in subscriptions:
            if sub.selector.startswith(SREM_SELECTOR_HEAD) and sub.selector not in wanted:
                await api.delete_subscription(sub.id)
        return [str(made[selector].endpoints[0].source) for selector in selectors]


def _compare(translator: Translator, existing: list[LocalCapability]
             ) -> tuple[dict[str, Capability], set[str], list[LocalCapability]]:
    """The capabilities wanted (by publicationId), those the node holds already, and its others."""
    wanted = {str(c.application.publicationId): c for c in translator.capabilities()}
    current, stale = set(), []
    for capability in existing:
        key = str(capability.definition.application.publicationId)
        want = wanted.get(key)
        if want is not None and _same(capability, want):
            current.add(key)
        else:
            stale.append(capability)
    return wanted, current, stale


def _same(stored: LocalCapability, wanted: Capability) -> bool:
    """The node holds ``wanted`` already (what it stores may add properties; those the bridge gives decide)."""
    have = stored.definition.to_json()
    want = wanted.to_json()
    return all(have.get(part, {}).get(k) == v for part in ("application", "metadata") for k, v in want.get(part, {}).items())
