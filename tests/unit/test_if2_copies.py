"""What IF2 already has of a C-Roads message the BI gives out again (interchange/bridges/if2/copies.py),
and the republishing policy's view of it (RepublishPolicy.holds)."""
from __future__ import annotations

import asyncio

from interchange.bridges.if2.copies import IF2Copies
from interchange.bridges.if2.republish import RepublishPolicy


async def test_a_confirmed_copy_is_at_if2_once() -> None:
    """Confirmed, whatever became of its settlement: the next delivery of it is not published again,
    the one after that is (a publisher's new copy)."""
    copies = IF2Copies()
    assert not await copies.at_if2("a")
    future = copies.publishing("a")
    copies.published("a", future, confirmed=True)
    assert await copies.at_if2("a")
    assert not await copies.at_if2("a") and len(copies) == 0


async def test_an_unconfirmed_copy_is_published_again() -> None:
    copies = IF2Copies()
    copies.published("a", copies.publishing("a"), confirmed=False)
    assert not await copies.at_if2("a") and len(copies) == 0


async def test_a_copy_being_published_is_waited_for() -> None:
    copies = IF2Copies()
    future = copies.publishing("a")
    asking = asyncio.ensure_future(copies.at_if2("a"))
    await asyncio.sleep(0)
    assert not asking.done()
    copies.published("a", future, confirmed=True)
    assert await asking


async def test_a_copy_waited_for_whose_publish_failed_is_published_again() -> None:
    """The waiter learns the failure (it publishes the copy itself); the copy being published again
    is a new publish, which an older publish's end does not touch."""
    copies = IF2Copies()
    first = copies.publishing("a")
    asking = asyncio.ensure_future(copies.at_if2("a"))
    await asyncio.sleep(0)
    copies.published("a", first, confirmed=False)
    assert not await asking
    again = copies.publishing("a")
    copies.published("a", first, confirmed=True)  # (late: the first publish's end again)
    assert isinstance(copies.known("a"), asyncio.Future)
    copies.published("a", again, confirmed=True)
    assert copies.known("a") is True


async def test_at_most_limit_copies_are_remembered() -> None:
    copies = IF2Copies(limit=2)
    for name in "abc":
        copies.published(name, copies.publishing(name), confirmed=True)
    assert len(copies) == 2 and not await copies.at_if2("a") and await copies.at_if2("c")


def test_the_policy_holds_the_content_last_published() -> None:
    policy: RepublishPolicy[None] = RepublishPolicy(60.0)
    assert not policy.holds("k", b"1")
    assert policy.offer("k", b"1", None, 10_000, 0.0)
    assert policy.holds("k", b"1") and not policy.holds("k", b"0")
    assert policy.offer("k", b"2", None, 10_000, 1.0)
    assert not policy.holds("k", b"1")
