"""Chapter 4.3 / appendices C-D checks of the Improved Interface, over ii_api's client and models.

IP_105/093/094 capability exchange: POST <base>/capabilities answered with the target's own
capabilities, version "2.0", name = its certificate CN (Table 9). IP_106/097/108/110 subscription
exchange: POST <base>/subscriptions is answered 202 with a path per subscription; polling that
path settles at NOT_VALID for a selector that does not parse, NO_OVERLAP for one that matches no
capability, CREATED with complete endpoints (host, port, source; Table 15) for one that matches;
IP_107 the subscription is listed at <base>/<our name>/subscriptions and DELETE on its path ends
it (no longer listed, its path no longer answering a status). IP_126: a client certificate whose CN
is no SRV target is refused with 403.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from cryptography import x509

from certs.tls import TlsFiles, client_context, peer_common_name
from ii_api.peers.client import IIClient, IIClientError
from ii_api.wire.models import (
    CapabilitiesMessage,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionRequestItem,
    SubscriptionStatus,
)
from interop_kit import badcerts
from interop_kit.model import Check, CheckFailed, CheckSkipped, Findings, Target

SETTLE_S = 15.0
POLL_EVERY_S = 0.2
NOT_VALID_SELECTOR = "messageType = = 'DENM' AND"
NO_OVERLAP_SELECTOR = "publisherId = 'interop-kit-no-such-publisher'"
DEFAULT_SELECTOR = "messageType = 'DENM'"


@dataclass(frozen=True)
class _Peer:
    name: str
    host: str
    port: int


def own_name(files: TlsFiles) -> str:
    """The CN of the identity's certificate (the first one in its chain file)."""
    return peer_common_name(x509.load_pem_x509_certificates(files.cert_chain.read_bytes())[0])


def _peer(target: Target) -> _Peer:
    return _Peer(target.name, target.connect_host(target.ii_host), target.ii_port)


@asynccontextmanager
async def _client(target: Target, identity: TlsFiles | None = None) -> AsyncIterator[IIClient]:
    context = client_context(identity or target.identity)
    client = IIClient(lambda: context, base_path=target.ii_base_path, timeout_s=SETTLE_S)
    try:
        yield client
    finally:
        await client.close()


async def capability_exchange(target: Target, findings: Findings) -> str:
    async with _client(target) as client:
        answer = await client.post_capabilities(_peer(target), CapabilitiesMessage(name=own_name(target.identity),
                                                                                   capabilities=[]))
    if answer.version != "2.0":
        raise CheckFailed(f"capabilities version {answer.version!r}, Table 9 requires '2.0'")
    if answer.name.lower() != target.name.lower():
        raise CheckFailed(f"capabilities name {answer.name!r} is not the interchange's CN {target.name!r}")
    return f"version 2.0, name {answer.name}, {len(answer.capabilities)} capabilities"


async def _settle(client: IIClient, target: Target, path: str) -> SubscriptionPollResponse:
    """Poll ``path`` until the status is no longer REQUESTED (IP_110), at most SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        status = await client.poll_subscription(_peer(target), path)
        if status.status is not SubscriptionStatus.REQUESTED or time.monotonic() > deadline:
            return status
        await asyncio.sleep(POLL_EVERY_S)


async def _request(client: IIClient, target: Target, selector: str) -> SubscriptionPollResponse:
    response = await client.post_subscriptions(_peer(target), SubscriptionRequest(
        name=own_name(target.identity), subscriptions=[SubscriptionRequestItem(selector=selector)]))
    if len(response.subscriptions) != 1:
        raise CheckFailed(f"one subscription requested, {len(response.subscriptions)} in the answer")
    return await _settle(client, target, response.subscriptions[0].path)


async def _expect_status(target: Target, selector: str, expected: SubscriptionStatus) -> str:
    async with _client(target) as client:
        settled = await _request(client, target, selector)
        try:
            await client.delete_subscription(_peer(target), settled.path)
        except IIClientError:
            pass  # a refused subscription may already be gone; this check is about its status
    if settled.status is not expected:
        raise CheckFailed(f"selector {selector!r}: status {settled.status.value} "
                          f"({settled.errorMessage or 'no errorMessage'}), expected {expected.value}")
    return f"{expected.value}: {settled.errorMessage or '(no errorMessage)'}"


async def subscription_not_valid(target: Target, findings: Findings) -> str:
    return await _expect_status(target, NOT_VALID_SELECTOR, SubscriptionStatus.NOT_VALID)


async def subscription_no_overlap(target: Target, findings: Findings) -> str:
    return await _expect_status(target, NO_OVERLAP_SELECTOR, SubscriptionStatus.NO_OVERLAP)


async def subscription_created(target: Target, findings: Findings) -> str:
    selector = target.traffic.selector if target.traffic is not None else DEFAULT_SELECTOR
    async with _client(target) as client:
        settled = await _request(client, target, selector)
    findings.values["subscription"] = settled
    if settled.status is not SubscriptionStatus.CREATED:
        raise CheckFailed(f"selector {selector!r}: status {settled.status.value} "
                          f"({settled.errorMessage or 'no errorMessage'}) after {SETTLE_S:g} s, expected CREATED")
    if not settled.endpoints or not all(e.complete for e in settled.endpoints):
        raise CheckFailed("CREATED without complete endpoints (host, port, source)")
    where = ", ".join(f"{e.host}:{e.port} source {e.source}" for e in settled.endpoints)
    return f"CREATED at {settled.path}: {where}"


def created_subscription(findings: Findings, *, endpoints: bool = False) -> SubscriptionPollResponse:
    """The CREATED subscription of ii.subscription.created (with ``endpoints``: one with complete
    endpoints, which the BI checks connect to); CheckSkipped without one."""
    subscription = findings.values.get("subscription")
    if not isinstance(subscription, SubscriptionPollResponse) or subscription.status is not SubscriptionStatus.CREATED:
        raise CheckSkipped("needs a CREATED subscription (check ii.subscription.created)")
    if endpoints and not (subscription.endpoints and all(e.complete for e in subscription.endpoints)):
        raise CheckSkipped("needs a CREATED subscription with complete endpoints to connect to (check "
                           "ii.subscription.created)")
    return subscription


async def subscription_listed(target: Target, findings: Findings) -> str:
    subscription = created_subscription(findings)
    async with _client(target) as client:
        listed = await client.list_subscriptions(_peer(target), own_name(target.identity))
    ids = [s.id for s in listed.subscriptions]
    if subscription.id not in ids:
        raise CheckFailed(f"subscription {subscription.id} not in the list {ids}")
    return f"{len(ids)} subscriptions listed, including {subscription.id}"


async def subscription_delete(target: Target, findings: Findings) -> str:
    """IP_107: after DELETE the subscription is gone from the list; polling its path no longer
    answers a status (the profile names no status code for that: 404 and 410 are both taken)."""
    subscription = created_subscription(findings)
    async with _client(target) as client:
        await client.delete_subscription(_peer(target), subscription.path)
        listed = await client.list_subscriptions(_peer(target), own_name(target.identity))
        if subscription.id in [s.id for s in listed.subscriptions]:
            raise CheckFailed(f"the deleted subscription {subscription.id} is still listed")
        try:
            after = await client.poll_subscription(_peer(target), subscription.path)
        except IIClientError as exc:
            if exc.status in (404, 410):
                return f"DELETE {subscription.path} done: no longer listed, polling it answers {exc.status}"
            raise CheckFailed(f"polling the deleted subscription: {exc}") from None
    raise CheckFailed(f"the deleted subscription still answers with status {after.status.value}")


async def refuse_non_srv_target(target: Target, findings: Findings) -> str:
    identity = target.actor
    if identity is None and target.pki is not None:
        identity = badcerts.identities_for(target, findings)[1]["valid"]
    if identity is None:
        raise CheckSkipped("needs --actor-cert/--actor-key or a prepared --pki (a certificate whose CN is no SRV target)")
    cn = own_name(identity)
    async with _client(target, identity) as client:
        try:
            await client.post_capabilities(_peer(target), CapabilitiesMessage(name=cn, capabilities=[]))
        except IIClientError as exc:
            if exc.status == 403:
                return f"CN {cn!r} refused with 403"
            if exc.status is None:  # no HTTP answer: the certificate may not be trusted at all
                raise CheckSkipped(f"no HTTP answer for CN {cn!r} ({exc}): a refusal before HTTP cannot be told "
                                   "from a certificate the target does not trust; this check reads the 403 of an "
                                   "HTTP answer (see the tls.ii.refuse-* checks for whether the target accepts "
                                   "that certificate)") from None
            raise CheckFailed(f"expected 403 for CN {cn!r}: {exc}") from None
    raise CheckFailed(f"POST /capabilities by {cn!r}, which is no SRV target, was accepted")


def ii_checks() -> list[Check]:
    return [
        Check("ii.capabilities", "IP_094", "capability exchange answered with version 2.0 and name = CN",
              capability_exchange, "ii"),
        Check("ii.subscription.not-valid", "IP_097", "an invalid selector settles at NOT_VALID", subscription_not_valid, "ii"),
        Check("ii.subscription.no-overlap", "IP_082", "a selector matching no capability settles at NO_OVERLAP",
              subscription_no_overlap, "ii"),
        Check("ii.subscription.created", "IP_108", "a matching selector settles at CREATED with endpoints",
              subscription_created, "ii"),
        Check("ii.subscription.listed", "IP_107", "the subscription is listed at <base>/<name>/subscriptions",
              subscription_listed, "ii"),
        Check("ii.refuse-non-srv-target", "IP_126", "a CN that is no SRV target is refused with 403",
              refuse_non_srv_target, "ii"),
    ]


def ii_closing_checks() -> list[Check]:
    """Run after the BI checks, which use the CREATED subscription."""
    return [Check("ii.subscription.delete", "IP_107", "DELETE on the path ends the subscription", subscription_delete, "ii")]
