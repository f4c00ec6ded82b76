"""SQLite persistence of the Improved Interface state (ii_api.storage.store)."""
from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from ii_api.peers.discovery import Neighbour
from ii_api.storage.store import (
    DB_FILENAME,
    SCHEMA_VERSION,
    AsyncStore,
    DuplicatePublicationIdError,
    NotFoundError,
    Store,
    StoreError,
)
from interchange.testing.ii_harness import schema_1_database

A = Neighbour("ixn-a.one.test", "10.0.0.1", 8443, "one.test", 10, 5)
B = Neighbour("ixn-b.two.test", "10.0.0.2", 443, "two.test")
DENM = {"messageType": "DENM", "publisherId": "NO00001", "publicationId": "NO00001:1", "quadTree": ["0120"]}


class Clock:
    """A settable millisecond clock."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[Store]:
    with Store.open(tmp_path / "data", clock=clock) as opened:
        yield opened


def test_new_database_uses_wal_full_sync_and_the_latest_schema(tmp_path: Path, store: Store) -> None:
    assert (tmp_path / "data" / DB_FILENAME).is_file()
    assert store.schema_version == SCHEMA_VERSION
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_neighbours_upsert_keeps_first_seen(store: Store, clock: Clock) -> None:
    store.neighbours.upsert([A, B])
    first = clock.now
    clock.now += 60_000
    moved = Neighbour(A.name, "10.0.0.99", 9443, "one.test", 1, 1)
    store.neighbours.upsert([moved])

    got = store.neighbours.get(A.name)
    assert got is not None
    assert (got.host, got.port, got.priority, got.weight) == ("10.0.0.99", 9443, 1, 1)
    assert (got.first_seen_ms, got.last_seen_ms) == (first, first + 60_000)
    assert [n.name for n in store.neighbours.list()] == [A.name, B.name]
    assert store.neighbours.delete(B.name) and not store.neighbours.delete(B.name)
    assert store.neighbours.get(B.name) is None


def test_neighbour_capabilities_are_replaced_and_deleted_with_the_neighbour(store: Store, clock: Clock) -> None:
    store.neighbours.upsert([A])
    store.neighbour_capabilities.put(A.name, {"version": "1.0", "capabilities": [DENM]})
    clock.now += 1
    store.neighbour_capabilities.put(A.name, {"version": "1.0", "capabilities": []})
    got = store.neighbour_capabilities.get(A.name)
    assert got is not None and got.document == {"version": "1.0", "capabilities": []} and got.received_ms == clock.now
    assert [c.neighbour for c in store.neighbour_capabilities.list()] == [A.name]
    store.neighbours.delete(A.name)
    assert store.neighbour_capabilities.get(A.name) is None


def test_outgoing_subscription_lifecycle(store: Store, clock: Clock) -> None:
    sub = store.outgoing.add(neighbour=A.name, selector="messageType = 'DENM'", status="REQUESTED")
    assert (sub.status, sub.endpoints, sub.remote_id, sub.created_ms) == ("REQUESTED", [], None, clock.now)
    clock.now += 5
    endpoints = [{"host": "ixn-a.one.test", "port": 5671, "source": "sub-1", "maxBandwidth": 0}]
    updated = store.outgoing.update(sub.id, status="CREATED", remote_id="17",
                                    remote_path="/me.one.test/subscriptions/17", endpoints=endpoints)
    assert (updated.status, updated.remote_id, updated.endpoints) == ("CREATED", "17", endpoints)
    assert (updated.created_ms, updated.last_updated_ms) == (sub.created_ms, clock.now)
    assert store.outgoing.update(sub.id, error="timeout").remote_id == "17"  # untouched columns stay
    assert store.outgoing.update(sub.id, error=None).error is None  # None clears
    assert store.outgoing.list(A.name) == [store.outgoing.get(sub.id)]
    assert store.outgoing.list("someone-else") == []
    assert store.outgoing.delete(sub.id)
    with pytest.raises(NotFoundError):
        store.outgoing.update(sub.id, status="CREATED")


def test_incoming_subscriptions_are_scoped_by_owner(store: Store) -> None:
    sub = store.incoming.add(owner_cn=A.name, selector="originatingCountry = 'NO'", status="REQUESTED",
                             consumer_common_name="actor-1")
    assert store.incoming.get(sub.id, A.name) == sub
    assert store.incoming.get(sub.id, B.name) is None
    with pytest.raises(NotFoundError):
        store.incoming.update(sub.id, B.name, status="CREATED")
    assert not store.incoming.delete(sub.id, B.name)
    created = store.incoming.update(sub.id, A.name, status="CREATED", source_address="ixn-a.one.test-1",
                                    endpoints=[{"port": 5671}])
    assert (created.status, created.source_address, created.consumer_common_name) == (
        "CREATED", "ixn-a.one.test-1", "actor-1")
    assert store.incoming.delete(sub.id, A.name)
    assert store.incoming.list() == []


def test_deliveries_and_local_subscriptions(store: Store) -> None:
    delivery = store.deliveries.add(actor_cn="actor-1", selector="publicationId = 'NO00001:1'", status="REQUESTED")
    done = store.deliveries.update(delivery.id, "actor-1", status="CREATED", target_address="actor-1-d1")
    assert (done.status, done.target_address) == ("CREATED", "actor-1-d1")
    assert store.deliveries.list("actor-1") == [done] and store.deliveries.list("actor-2") == []

    sub = store.local_subscriptions.add(actor_cn="actor-2", selector="messageType = 'DENM'", status="REQUESTED")
    bad = store.local_subscriptions.update(sub.id, status="ILLEGAL", error="unknown identifier 'x'")
    assert (bad.status, bad.error) == ("ILLEGAL", "unknown identifier 'x'")
    assert store.local_subscriptions.get(sub.id, "actor-1") is None
    assert store.local_subscriptions.delete(sub.id, "actor-2")
    assert store.deliveries.delete(delivery.id)
    assert store.deliveries.get(delivery.id) is None


def test_ids_are_never_reused(store: Store) -> None:
    first = store.deliveries.add(actor_cn="actor-1", selector="1 = 1", status="REQUESTED")
    store.deliveries.delete(first.id)
    assert store.deliveries.add(actor_cn="actor-1", selector="1 = 1", status="REQUESTED").id > first.id


def test_publication_id_is_unique_across_actors(store: Store) -> None:
    cap = store.capabilities.add(actor_cn="actor-1", publication_id="NO00001:1", document=DENM)
    assert store.capabilities.find("NO00001:1") == cap
    with pytest.raises(DuplicatePublicationIdError) as raised:
        store.capabilities.add(actor_cn="actor-2", publication_id="NO00001:1",
                               document={**DENM, "publisherId": "NO00002"})
    assert raised.value.publication_id == "NO00001:1"
    assert [c.actor_cn for c in store.capabilities.list()] == ["actor-1"]
    changed = store.capabilities.update(cap.id, "actor-1", document={**DENM, "quadTree": ["0121"]})
    assert changed.document["quadTree"] == ["0121"] and changed.publication_id == "NO00001:1"
    assert not store.capabilities.delete(cap.id, "actor-2")
    assert store.capabilities.delete(cap.id, "actor-1")
    again = store.capabilities.add(actor_cn="actor-2", publication_id="NO00001:1", document=DENM)
    assert again.actor_cn == "actor-2"  # free again


def test_a_failing_batch_is_rolled_back_entirely(store: Store) -> None:
    store.capabilities.add(actor_cn="actor-1", publication_id="taken", document=DENM)
    with pytest.raises(DuplicatePublicationIdError):
        store.capabilities.add_all("actor-2", [("fresh-1", DENM), ("fresh-2", DENM), ("taken", DENM)])
    assert [c.publication_id for c in store.capabilities.list()] == ["taken"]

    with pytest.raises(StoreError, match="constraint"):
        store.neighbours.upsert([A, Neighbour("bad.one.test", "10.0.0.3", 70000, "one.test")])  # port CHECK
    assert store.neighbours.list() == []


def test_explicit_transaction_rolls_back_on_any_exception(store: Store) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with store.transaction():
            store.neighbours.upsert([A])
            store.outgoing.add(neighbour=A.name, selector="1 = 1", status="REQUESTED")
            assert store.neighbours.get(A.name) is not None  # visible inside
            raise RuntimeError("boom")
    assert store.neighbours.list() == [] and store.outgoing.list() == []
    with store.transaction():
        store.neighbours.upsert([A])
        store.outgoing.add(neighbour=A.name, selector="1 = 1", status="REQUESTED")
    assert len(store.neighbours.list()) == len(store.outgoing.list()) == 1


def test_invalid_values_are_refused(store: Store) -> None:
    with pytest.raises(StoreError):
        store.deliveries.add(actor_cn="actor-1", selector="1 = 1", status="")
    with pytest.raises(StoreError):
        store.deliveries.add(actor_cn="", selector="1 = 1", status="REQUESTED")
    with pytest.raises(ValueError):
        store.neighbour_capabilities.put(A.name, {"x": float("nan")})
    assert store.deliveries.list() == [] and store.neighbour_capabilities.list() == []


def test_everything_persists_across_reopen(tmp_path: Path, clock: Clock) -> None:
    with Store.open(tmp_path, clock=clock) as first:
        first.neighbours.upsert([A])
        first.neighbour_capabilities.put(A.name, [DENM])
        out = first.outgoing.add(neighbour=A.name, selector="1 = 1", status="REQUESTED")
        inc = first.incoming.add(owner_cn=B.name, selector="1 = 1", status="CREATED", source_address="q1")
        cap = first.capabilities.add(actor_cn="actor-1", publication_id="NO00001:1", document=DENM)
        dlv = first.deliveries.add(actor_cn="actor-1", selector="1 = 1", status="CREATED", target_address="t1")
        sub = first.local_subscriptions.add(actor_cn="actor-1", selector="1 = 1", status="CREATED",
                                            consumer_common_name="actor-1")
    with Store.open(tmp_path, create=False, clock=clock) as again:
        assert again.schema_version == SCHEMA_VERSION
        assert again.neighbours.get(A.name) is not None
        assert again.neighbour_capabilities.get(A.name).document == [DENM]  # type: ignore[union-attr]
        assert again.outgoing.get(out.id) == out
        assert again.incoming.get(inc.id) == inc
        assert again.capabilities.get(cap.id) == cap
        assert again.deliveries.get(dlv.id) == dlv
        assert again.local_subscriptions.get(sub.id) == sub


def test_open_without_create_and_newer_schema_are_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open"):
        Store.open(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    with Store.open(tmp_path):
        pass
    with sqlite3.connect(tmp_path / DB_FILENAME) as raw:
        raw.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    raw.close()
    with pytest.raises(StoreError, match="newer"):
        Store.open(tmp_path)


async def test_async_facade_runs_in_one_worker_thread(tmp_path: Path, clock: Clock) -> None:
    threads: set[int] = set()
    async with AsyncStore.for_data_dir(tmp_path, clock=clock) as store:
        await store.call(lambda s: s.neighbours.upsert([A, B]))
        cap = await store.capabilities.add(actor_cn="actor-1", publication_id="NO00001:1", document=DENM)
        with pytest.raises(DuplicatePublicationIdError):
            await store.call(lambda s: s.capabilities.add_all("actor-2", [("x", DENM), ("NO00001:1", DENM)]))
        subs = await asyncio.gather(*(store.incoming.add(owner_cn=A.name, selector=f"n = {i}", status="REQUESTED")
                                      for i in range(20)))
        assert len({s.id for s in subs}) == 20
        updated = await store.incoming.update(subs[0].id, A.name, status="CREATED")
        assert updated.status == "CREATED"
        for _ in range(3):
            threads.add(await store.call(lambda s: threading.get_ident()))
        assert threads != {threading.get_ident()} and len(threads) == 1

        def two_writes(s: Store) -> None:
            with s.transaction():
                s.deliveries.add(actor_cn="actor-1", selector="1 = 1", status="REQUESTED")
                s.deliveries.add(actor_cn="actor-1", selector="2 = 2", status="REQUESTED")

        await store.call(two_writes)
        assert [n.name for n in await store.call(lambda s: s.neighbours.list())] == [A.name, B.name]
        assert await store.capabilities.list() == [cap]
        assert len(await store.deliveries.list("actor-1")) == 2
    with pytest.raises(StoreError, match="not open"):
        await store.call(lambda s: s.neighbours.list())
    with Store.open(tmp_path) as again:  # what the facade wrote is on disk
        assert len(again.incoming.list(A.name)) == 20


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def test_a_schema_1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / DB_FILENAME
    with closing(schema_1_database(path)) as old:
        assert "granted" not in _columns(old, "incoming_subscriptions")
        old.execute("INSERT INTO neighbours VALUES (?, '10.0.0.1', 443, 'one.test', 0, 0, 1, 2)", (A.name,))
        old.execute("INSERT INTO incoming_subscriptions (owner_cn, selector, status, endpoints, source_address, "
                    "created_ms, last_updated_ms) VALUES (?, ?, 'CREATED', ?, 'ii-sub-1', 1, 2)",
                    (A.name, "messageType = 'DENM'", '[{"port": 5671}]'))
        old.commit()
    with pytest.raises(StoreError, match="older than this program's"):
        Store(path, read_only=True)  # never migrates
    with Store(path, create=False) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
        (row,) = store.incoming.list()
        assert (row.owner_cn, row.selector, row.status, row.endpoints, row.source_address, row.granted,
                row.last_updated_ms) == (A.name, "messageType = 'DENM'", "CREATED", [{"port": 5671}], "ii-sub-1",
                                         None, 2)
        assert store.incoming.update(row.id, granted=["NO:b", "NO:a", "NO:b"]).granted == ["NO:a", "NO:b"]
        assert [n.name for n in store.neighbours.list()] == [A.name] and store.neighbours.departures() == {}
    with Store(path, read_only=True) as reader:
        assert reader.incoming.list()[0].granted == ["NO:a", "NO:b"]
        with pytest.raises(StoreError):
            reader.deliveries.add(actor_cn="actor-1", selector="1 = 1", status="CREATED")


def test_incoming_grants_are_stored(store: Store) -> None:
    created = store.incoming.add(owner_cn=A.name, selector="1 = 1", status="CREATED", source_address="ii-sub-1",
                                 granted=frozenset({"NO:2", "NO:1"}))
    refused = store.incoming.add(owner_cn=A.name, selector="2 = 2", status="NO_OVERLAP")
    assert (created.granted, refused.granted) == (["NO:1", "NO:2"], None)
    assert store.incoming.update(created.id, status="RESUBSCRIBE").granted == ["NO:1", "NO:2"]
    assert store.incoming.update(created.id, granted=[]).granted == []


def test_departures_keep_the_first_time_end_when_found_again_and_expire_with_the_subscriptions(
        store: Store, clock: Clock) -> None:
    store.neighbours.upsert([A, B])
    store.neighbour_capabilities.put(A.name, {"capabilities": []})
    mine = store.incoming.add(owner_cn=A.name, selector="1 = 1", status="CREATED", source_address="ii-sub-1")
    theirs = store.incoming.add(owner_cn=B.name, selector="1 = 1", status="CREATED", source_address="ii-sub-2")
    left = clock.now
    assert store.neighbours.record_departure(A.name) == left
    clock.now += 1_000
    assert store.neighbours.record_departure(A.name) == left  # the first departure counts
    assert store.neighbours.get(A.name) is None and store.neighbour_capabilities.get(A.name) is None
    assert store.neighbours.departures() == {A.name: left}
    store.neighbours.upsert([A])  # found again
    assert store.neighbours.departures() == {}
    store.neighbours.record_departure(A.name)
    assert store.expire_departure(A.name) == [mine]
    assert store.incoming.list() == [theirs] and store.neighbours.departures() == {}


def test_read_only_store_refuses_a_newer_schema_and_a_foreign_file(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_FILENAME) as raw:
        raw.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    raw.close()
    with pytest.raises(StoreError, match="newer"):
        Store.open(tmp_path, read_only=True)
    (tmp_path / "other.db").write_bytes(b"not a database at all" * 100)
    with closing(sqlite3.connect(tmp_path / "foreign.db")) as foreign:
        foreign.execute("CREATE TABLE t (x)")
    for name in ("other.db", "foreign.db"):
        with pytest.raises(StoreError, match="is not an II database"):
            Store(tmp_path / name, read_only=True)
