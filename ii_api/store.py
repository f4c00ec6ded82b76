"""SQLite persistence of the Improved Interface's state (embedded, one file in the data directory).

Neighbours (IP_073/089) and their capabilities (IP_076), subscriptions to and from
neighbours (IP_078/079), and local actors' capabilities (IP_077), deliveries and
subscriptions. :class:`Store` is the synchronous API (tests, CLI, and the worker
thread); :class:`AsyncStore` runs it in one dedicated thread so the event loop never
waits on the disk.

Durability: WAL journal with ``synchronous=FULL``, so a write that returned is on
disk and a crash mid-write loses nothing acknowledged. Every write is one
transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on error); several
writes can share one with :meth:`Store.transaction`.

Schema: numbered migrations, applied in order on open and recorded in
``schema_version``; add a migration by appending to :data:`MIGRATIONS` (a database
made by an older version is upgraded in place). Ids of subscriptions, deliveries and
capabilities are never reused (AUTOINCREMENT), since they appear in paths that
neighbours and actors poll.

Read-only use (``read_only=True``, e.g. ``interchange subscriptions`` while the node
runs): a ``mode=ro`` connection that never migrates; WAL lets it read while the node
writes.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from ii_api.discovery import Neighbour

DB_FILENAME = "ii.sqlite3"

Json = Any
"""A JSON-serialisable value (dict, list, str, int, float, bool, None)."""


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def db_path(data_dir: str | Path) -> Path:
    """The II database file of a node's data directory."""
    return Path(data_dir) / DB_FILENAME


# --------------------------------------------------------------------------- errors

class StoreError(Exception):
    """A store operation failed (constraint, missing database, newer schema)."""


class NotFoundError(StoreError, LookupError):
    """No row with that id (or not owned by the given actor/neighbour)."""


class DuplicatePublicationIdError(StoreError):
    """The publicationId is already used by a capability (it is unique across the network)."""

    def __init__(self, publication_id: str) -> None:
        super().__init__(f"publicationId {publication_id!r} is already in use")
        self.publication_id = publication_id


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Default of update arguments: leave the column as it is (None clears it)."""


# --------------------------------------------------------------------------- rows

@dataclass(frozen=True)
class StoredNeighbour:
    name: str
    host: str
    port: int
    domain: str
    priority: int
    weight: int
    first_seen_ms: int
    last_seen_ms: int


@dataclass(frozen=True)
class NeighbourCapabilities:
    """The latest capabilities document a neighbour sent (IP_076)."""

    neighbour: str
    document: Json
    received_ms: int


@dataclass(frozen=True)
class OutgoingSubscription:
    """Our subscription request to a neighbour (IP_079)."""

    id: int
    neighbour: str
    selector: str
    consumer_common_name: str | None
    status: str
    remote_id: str | None
    remote_path: str | None
    endpoints: Json
    error: str | None
    created_ms: int
    last_updated_ms: int


@dataclass(frozen=True)
class IncomingSubscription:
    """A subscription request received from a neighbour (IP_078).

    ``granted``: the publicationIds its source serves, fixed when it was CREATED (IP_134; a
    capability that appears later needs RESUBSCRIBE); None when it has no grant (not CREATED, or
    a row from before schema version 2).
    """

    id: int
    owner_cn: str
    consumer_common_name: str | None
    selector: str
    status: str
    endpoints: Json
    source_address: str | None
    error: str | None
    created_ms: int
    last_updated_ms: int
    granted: Json = None


@dataclass(frozen=True)
class LocalCapability:
    """A capability registered by a local actor (IP_077); publicationId is unique."""

    id: int
    actor_cn: str
    publication_id: str
    document: Json
    created_ms: int
    last_updated_ms: int


@dataclass(frozen=True)
class Delivery:
    """A local actor's delivery (where it publishes to the broker)."""

    id: int
    actor_cn: str
    selector: str
    status: str
    target_address: str | None
    error: str | None
    created_ms: int
    last_updated_ms: int


@dataclass(frozen=True)
class LocalSubscription:
    """A local actor's subscription (a queue bound with its selector)."""

    id: int
    actor_cn: str
    selector: str
    consumer_common_name: str | None
    status: str
    endpoints: Json
    error: str | None
    created_ms: int
    last_updated_ms: int


# --------------------------------------------------------------------------- schema

_V1 = (
    """CREATE TABLE neighbours (
        name TEXT PRIMARY KEY CHECK (name <> ''),
        host TEXT NOT NULL,
        port INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
        domain TEXT NOT NULL,
        priority INTEGER NOT NULL DEFAULT 0,
        weight INTEGER NOT NULL DEFAULT 0,
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL)""",
    """CREATE TABLE neighbour_capabilities (
        neighbour TEXT PRIMARY KEY CHECK (neighbour <> ''),
        document TEXT NOT NULL CHECK (json_valid(document)),
        received_ms INTEGER NOT NULL)""",
    """CREATE TABLE outgoing_subscriptions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        neighbour TEXT NOT NULL CHECK (neighbour <> ''),
        selector TEXT NOT NULL,
        consumer_common_name TEXT,
        status TEXT NOT NULL CHECK (status <> ''),
        remote_id TEXT,
        remote_path TEXT,
        endpoints TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(endpoints)),
        error TEXT,
        created_ms INTEGER NOT NULL,
        last_updated_ms INTEGER NOT NULL)""",
    "CREATE INDEX outgoing_subscriptions_neighbour ON outgoing_subscriptions (neighbour)",
    """CREATE TABLE incoming_subscriptions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        owner_cn TEXT NOT NULL CHECK (owner_cn <> ''),
        consumer_common_name TEXT,
        selector TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status <> ''),
        endpoints TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(endpoints)),
        source_address TEXT,
        error TEXT,
        created_ms INTEGER NOT NULL,
        last_updated_ms INTEGER NOT NULL)""",
    "CREATE INDEX incoming_subscriptions_owner ON incoming_subscriptions (owner_cn)",
    """CREATE TABLE local_capabilities (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        actor_cn TEXT NOT NULL CHECK (actor_cn <> ''),
        publication_id TEXT NOT NULL UNIQUE CHECK (publication_id <> ''),
        document TEXT NOT NULL CHECK (json_valid(document)),
        created_ms INTEGER NOT NULL,
        last_updated_ms INTEGER NOT NULL)""",
    "CREATE INDEX local_capabilities_actor ON local_capabilities (actor_cn)",
    """CREATE TABLE deliveries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        actor_cn TEXT NOT NULL CHECK (actor_cn <> ''),
        selector TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status <> ''),
        target_address TEXT,
        error TEXT,
        created_ms INTEGER NOT NULL,
        last_updated_ms INTEGER NOT NULL)""",
    "CREATE INDEX deliveries_actor ON deliveries (actor_cn)",
    """CREATE TABLE local_subscriptions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        actor_cn TEXT NOT NULL CHECK (actor_cn <> ''),
        selector TEXT NOT NULL,
        consumer_common_name TEXT,
        status TEXT NOT NULL CHECK (status <> ''),
        endpoints TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(endpoints)),
        error TEXT,
        created_ms INTEGER NOT NULL,
        last_updated_ms INTEGER NOT NULL)""",
    "CREATE INDEX local_subscriptions_actor ON local_subscriptions (actor_cn)",
)

_V2_GRANTS = (  # the publicationIds granted to an incoming subscription, a JSON list (IP_134)
    "ALTER TABLE incoming_subscriptions ADD COLUMN granted TEXT CHECK (granted IS NULL OR json_valid(granted))",
)

_V3_DEPARTURES = (  # neighbours that left DNS, and since when (their subscriptions here expire)
    """CREATE TABLE departed_neighbours (
        name TEXT PRIMARY KEY CHECK (name <> ''),
        departed_ms INTEGER NOT NULL)""",
)

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = ((1, _V1), (2, _V2_GRANTS), (3, _V3_DEPARTURES))
"""(version, statements) in ascending order; each runs in one transaction."""

SCHEMA_VERSION = MIGRATIONS[-1][0]

R = TypeVar("R")


@dataclass(frozen=True)
class _Table(Generic[R]):
    name: str
    row: type[R]
    owner: str | None = None  # column an owner filter applies to
    json: frozenset[str] = frozenset()

    @functools.cached_property
    def columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.row))  # type: ignore[arg-type]

    def decode(self, row: sqlite3.Row) -> R:
        return self.row(**{c: json.loads(row[c]) if c in self.json and row[c] is not None else row[c]
                           for c in self.columns})

    def encode(self, values: dict[str, Any]) -> dict[str, Any]:
        """Column values for SQLite: JSON columns dumped (None stays NULL), enum members as their value."""
        return {c: _dump(v) if c in self.json and v is not None else _text(v) for c, v in values.items()}


_OUTGOING = _Table("outgoing_subscriptions", OutgoingSubscription, "neighbour", frozenset({"endpoints"}))
_INCOMING = _Table("incoming_subscriptions", IncomingSubscription, "owner_cn", frozenset({"endpoints", "granted"}))
_CAPABILITIES = _Table("local_capabilities", LocalCapability, "actor_cn", frozenset({"document"}))
_DELIVERIES = _Table("deliveries", Delivery, "actor_cn")
_LOCAL_SUBS = _Table("local_subscriptions", LocalSubscription, "actor_cn", frozenset({"endpoints"}))


def _dump(value: Json) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _text(value: Any) -> Any:
    """Enum members as their value (sqlite binds plain str only)."""
    return getattr(value, "value", value)


def _id_list(ids: Iterable[str] | None) -> list[str] | None:
    """A set of ids as a sorted JSON list (None stays None)."""
    return None if ids is None else sorted(set(ids))


# --------------------------------------------------------------------------- sync store

class Store:
    """The II database over one SQLite connection, used from one thread.

    ``path`` is the database file (``":memory:"`` for a throw-away one); with
    ``create=False`` a missing file is a :class:`StoreError` instead of a new database.
    """

    def __init__(self, path: str | Path, *, create: bool = True, read_only: bool = False,
                 clock: Callable[[], int] = now_ms) -> None:
        self.path = path
        self._clock = clock
        self._depth = 0
        try:
            if str(path) == ":memory:":
                conn = sqlite3.connect(":memory:", isolation_level=None)
            elif create and not read_only:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(path, isolation_level=None)
            else:
                mode = "ro" if read_only else "rw"
                conn = sqlite3.connect(Path(path).resolve().as_uri() + f"?mode={mode}", uri=True, isolation_level=None)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open II database {path}: {exc}") from None
        conn.row_factory = sqlite3.Row
        self._conn = conn
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            if read_only:
                self._check_version()
            else:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                self._migrate()
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot open II database {path}: {exc}") from None
        except BaseException:
            conn.close()
            raise

    @classmethod
    def open(cls, data_dir: str | Path, *, create: bool = True, read_only: bool = False,
             clock: Callable[[], int] = now_ms) -> Store:
        """The store of a node's data directory (:data:`DB_FILENAME` inside it)."""
        return cls(db_path(data_dir), create=create, read_only=read_only, clock=clock)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])

    # ---- transactions

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction; nested use joins the outer one. Rolled back on any exception."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                self._conn.execute("ROLLBACK")
            raise
        finally:
            self._depth = 0

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            with self.transaction():
                yield self._conn
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"constraint failed: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(str(exc)) from exc

    def _check_version(self) -> None:
        """Read-only use: the schema must be this program's (nothing is migrated)."""
        try:
            current = self._conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        except sqlite3.DatabaseError:
            raise StoreError(f"{self.path} is not an II database") from None
        if current is None or current < SCHEMA_VERSION:
            raise StoreError(f"II database schema version {current} is older than this program's ({SCHEMA_VERSION}); "
                             "start the node once to upgrade it")
        if current > SCHEMA_VERSION:
            raise StoreError(f"II database schema version {current} is newer than this program's ({SCHEMA_VERSION})")

    def _migrate(self) -> None:
        with self.transaction():
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)")
            current = self._conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"II database schema version {current} is newer than this program's ({SCHEMA_VERSION})")
            for version, statements in MIGRATIONS:
                if version > current:
                    for statement in statements:
                        self._conn.execute(statement)
                    self._conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version, self._clock()))

    # ---- generic row operations (table and column names are constants, never input)

    def _insert(self, table: _Table[R], values: dict[str, Any]) -> R:
        now = self._clock()
        row = table.encode({**values, "created_ms": now, "last_updated_ms": now})
        with self._write() as conn:
            columns, marks = ", ".join(row), ", ".join("?" * len(row))
            cursor = conn.execute(f"INSERT INTO {table.name} ({columns}) VALUES ({marks})", tuple(row.values()))
            return self._require(table, int(cursor.lastrowid or 0), None)

    def _where(self, table: _Table[Any], row_id: int, owner: str | None) -> tuple[str, tuple[Any, ...]]:
        if owner is None:
            return "id = ?", (row_id,)
        return f"id = ? AND {table.owner} = ?", (row_id, owner)

    def _get(self, table: _Table[R], row_id: int, owner: str | None) -> R | None:
        where, params = self._where(table, row_id, owner)
        found = self._conn.execute(f"SELECT * FROM {table.name} WHERE {where}", params).fetchone()
        return None if found is None else table.decode(found)

    def _require(self, table: _Table[R], row_id: int, owner: str | None) -> R:
        found = self._get(table, row_id, owner)
        if found is None:
            raise NotFoundError(f"no {table.name} row with id {row_id}" + (f" for {owner}" if owner else ""))
        return found

    def _list(self, table: _Table[R], owner: str | None) -> list[R]:
        if owner is None:
            rows = self._conn.execute(f"SELECT * FROM {table.name} ORDER BY id").fetchall()
        else:
            rows = self._conn.execute(f"SELECT * FROM {table.name} WHERE {table.owner} = ? ORDER BY id",
                                      (owner,)).fetchall()
        return [table.decode(r) for r in rows]

    def _update(self, table: _Table[R], row_id: int, owner: str | None, changes: dict[str, Any]) -> R:
        changes = {c: v for c, v in changes.items() if v is not UNSET}
        changes["last_updated_ms"] = self._clock()
        values = table.encode(changes)
        where, params = self._where(table, row_id, owner)
        with self._write() as conn:
            cursor = conn.execute(f"UPDATE {table.name} SET {', '.join(f'{c} = ?' for c in values)} WHERE {where}",
                                  (*values.values(), *params))
            if cursor.rowcount == 0:
                raise NotFoundError(f"no {table.name} row with id {row_id}" + (f" for {owner}" if owner else ""))
            return self._require(table, row_id, None)

    def _delete(self, table: _Table[Any], row_id: int, owner: str | None) -> bool:
        where, params = self._where(table, row_id, owner)
        with self._write() as conn:
            return conn.execute(f"DELETE FROM {table.name} WHERE {where}", params).rowcount > 0

    # ---- neighbours (IP_073/089)

    def upsert_neighbours(self, neighbours: Iterable[Neighbour], *, seen_ms: int | None = None) -> None:
        """Record neighbours found by discovery; ``first_seen_ms`` is kept, the rest replaced. A
        neighbour found again is no longer departed."""
        seen = self._clock() if seen_ms is None else seen_ms
        rows = [(n.name, n.host, n.port, n.domain, n.priority, n.weight, seen, seen) for n in neighbours]
        with self._write() as conn:
            conn.executemany("DELETE FROM departed_neighbours WHERE name = ?", [(r[0],) for r in rows])
            conn.executemany(
                """INSERT INTO neighbours (name, host, port, domain, priority, weight, first_seen_ms, last_seen_ms)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (name) DO UPDATE SET host = excluded.host, port = excluded.port,
                       domain = excluded.domain, priority = excluded.priority, weight = excluded.weight,
                       last_seen_ms = excluded.last_seen_ms""", rows)

    def get_neighbour(self, name: str) -> StoredNeighbour | None:
        found = self._conn.execute("SELECT * FROM neighbours WHERE name = ?", (name,)).fetchone()
        return None if found is None else StoredNeighbour(**dict(found))

    def list_neighbours(self) -> list[StoredNeighbour]:
        rows = self._conn.execute("SELECT * FROM neighbours ORDER BY domain, name").fetchall()
        return [StoredNeighbour(**dict(r)) for r in rows]

    def delete_neighbour(self, name: str) -> bool:
        """Forget a neighbour and its capabilities document (its subscriptions stay)."""
        with self._write() as conn:
            conn.execute("DELETE FROM neighbour_capabilities WHERE neighbour = ?", (name,))
            return conn.execute("DELETE FROM neighbours WHERE name = ?", (name,)).rowcount > 0

    # ---- departed neighbours (no longer in DNS, IP_126)

    def record_departure(self, name: str, *, departed_ms: int | None = None) -> int:
        """Forget a neighbour that left DNS (as :meth:`delete_neighbour`) and note since when it is
        gone; an earlier departure is kept. Returns the departure time."""
        with self._write() as conn:
            self.delete_neighbour(name)
            conn.execute("INSERT INTO departed_neighbours (name, departed_ms) VALUES (?, ?) ON CONFLICT (name) "
                         "DO NOTHING", (name, self._clock() if departed_ms is None else departed_ms))
            return int(conn.execute("SELECT departed_ms FROM departed_neighbours WHERE name = ?",
                                    (name,)).fetchone()[0])

    def list_departures(self) -> dict[str, int]:
        """Departed neighbours and the time each left (ms since the epoch)."""
        return {r[0]: r[1] for r in self._conn.execute("SELECT name, departed_ms FROM departed_neighbours")}

    def expire_departure(self, name: str) -> list[IncomingSubscription]:
        """A departed neighbour's grace period is over: its subscriptions here and its departure record
        go, in one transaction. Returns the subscriptions deleted (their sources are the caller's)."""
        with self._write() as conn:
            rows = self._list(_INCOMING, name)
            conn.execute("DELETE FROM incoming_subscriptions WHERE owner_cn = ?", (name,))
            conn.execute("DELETE FROM departed_neighbours WHERE name = ?", (name,))
            return rows

    # ---- neighbour capabilities (IP_076)

    def put_neighbour_capabilities(self, neighbour: str, document: Json, *,
                                   received_ms: int | None = None) -> NeighbourCapabilities:
        """Replace the capabilities document of ``neighbour``."""
        received = self._clock() if received_ms is None else received_ms
        with self._write() as conn:
            conn.execute(
                """INSERT INTO neighbour_capabilities (neighbour, document, received_ms) VALUES (?, ?, ?)
                   ON CONFLICT (neighbour) DO UPDATE SET document = excluded.document,
                       received_ms = excluded.received_ms""", (neighbour, _dump(document), received))
        return NeighbourCapabilities(neighbour, json.loads(_dump(document)), received)

    def get_neighbour_capabilities(self, neighbour: str) -> NeighbourCapabilities | None:
        found = self._conn.execute("SELECT * FROM neighbour_capabilities WHERE neighbour = ?", (neighbour,)).fetchone()
        return None if found is None else NeighbourCapabilities(found[0], json.loads(found[1]), found[2])

    def list_neighbour_capabilities(self) -> list[NeighbourCapabilities]:
        rows = self._conn.execute("SELECT * FROM neighbour_capabilities ORDER BY neighbour").fetchall()
        return [NeighbourCapabilities(r[0], json.loads(r[1]), r[2]) for r in rows]

    def delete_neighbour_capabilities(self, neighbour: str) -> bool:
        with self._write() as conn:
            return conn.execute("DELETE FROM neighbour_capabilities WHERE neighbour = ?", (neighbour,)).rowcount > 0

    # ---- outgoing subscriptions (IP_079)

    def add_outgoing_subscription(self, neighbour: str, selector: str, *, status: str,
                                  consumer_common_name: str | None = None) -> OutgoingSubscription:
        return self._insert(_OUTGOING, {"neighbour": neighbour, "selector": selector, "status": status,
                                        "consumer_common_name": consumer_common_name, "endpoints": []})

    def update_outgoing_subscription(self, sub_id: int, *, status: str = UNSET, remote_id: str | None = UNSET,
                                     remote_path: str | None = UNSET, endpoints: Json = UNSET,
                                     error: str | None = UNSET) -> OutgoingSubscription:
        return self._update(_OUTGOING, sub_id, None, {"status": status, "remote_id": remote_id,
                                                      "remote_path": remote_path, "endpoints": endpoints,
                                                      "error": error})

    def get_outgoing_subscription(self, sub_id: int) -> OutgoingSubscription | None:
        return self._get(_OUTGOING, sub_id, None)

    def list_outgoing_subscriptions(self, neighbour: str | None = None) -> list[OutgoingSubscription]:
        return self._list(_OUTGOING, neighbour)

    def delete_outgoing_subscription(self, sub_id: int) -> bool:
        return self._delete(_OUTGOING, sub_id, None)

    # ---- incoming subscriptions (IP_078)

    def add_incoming_subscription(self, owner_cn: str, selector: str, *, status: str,
                                  consumer_common_name: str | None = None, source_address: str | None = None,
                                  granted: Iterable[str] | None = None) -> IncomingSubscription:
        return self._insert(_INCOMING, {"owner_cn": owner_cn, "selector": selector, "status": status,
                                        "consumer_common_name": consumer_common_name,
                                        "source_address": source_address, "endpoints": [],
                                        "granted": _id_list(granted)})

    def update_incoming_subscription(self, sub_id: int, *, owner_cn: str | None = None, status: str = UNSET,
                                     endpoints: Json = UNSET, source_address: str | None = UNSET,
                                     error: str | None = UNSET,
                                     granted: Iterable[str] | None = UNSET) -> IncomingSubscription:
        return self._update(_INCOMING, sub_id, owner_cn, {"status": status, "endpoints": endpoints,
                                                          "source_address": source_address, "error": error,
                                                          "granted": granted if granted is UNSET
                                                          else _id_list(granted)})

    def get_incoming_subscription(self, sub_id: int, *, owner_cn: str | None = None) -> IncomingSubscription | None:
        return self._get(_INCOMING, sub_id, owner_cn)

    def list_incoming_subscriptions(self, owner_cn: str | None = None) -> list[IncomingSubscription]:
        return self._list(_INCOMING, owner_cn)

    def delete_incoming_subscription(self, sub_id: int, *, owner_cn: str | None = None) -> bool:
        return self._delete(_INCOMING, sub_id, owner_cn)

    # ---- local capabilities (IP_077)

    def add_local_capabilities(self, actor_cn: str,
                               capabilities: Iterable[tuple[str, Json]]) -> list[LocalCapability]:
        """Register (publicationId, document) pairs of ``actor_cn``: all of them or none.

        Raises :class:`DuplicatePublicationIdError` when a publicationId is taken.
        """
        items = list(capabilities)
        with self.transaction():
            added = []
            for publication_id, document in items:
                try:
                    added.append(self._insert(_CAPABILITIES, {"actor_cn": actor_cn, "publication_id": publication_id,
                                                              "document": document}))
                except StoreError as exc:
                    if "local_capabilities.publication_id" in str(exc):
                        raise DuplicatePublicationIdError(publication_id) from None
                    raise
            return added

    def add_local_capability(self, actor_cn: str, publication_id: str, document: Json) -> LocalCapability:
        return self.add_local_capabilities(actor_cn, [(publication_id, document)])[0]

    def update_local_capability(self, cap_id: int, document: Json, *,
                                actor_cn: str | None = None) -> LocalCapability:
        """Replace a capability's document (its publicationId stays)."""
        return self._update(_CAPABILITIES, cap_id, actor_cn, {"document": document})

    def get_local_capability(self, cap_id: int, *, actor_cn: str | None = None) -> LocalCapability | None:
        return self._get(_CAPABILITIES, cap_id, actor_cn)

    def find_local_capability(self, publication_id: str) -> LocalCapability | None:
        found = self._conn.execute("SELECT * FROM local_capabilities WHERE publication_id = ?",
                                   (publication_id,)).fetchone()
        return None if found is None else _CAPABILITIES.decode(found)

    def list_local_capabilities(self, actor_cn: str | None = None) -> list[LocalCapability]:
        return self._list(_CAPABILITIES, actor_cn)

    def delete_local_capability(self, cap_id: int, *, actor_cn: str | None = None) -> bool:
        return self._delete(_CAPABILITIES, cap_id, actor_cn)

    # ---- deliveries

    def add_delivery(self, actor_cn: str, selector: str, *, status: str,
                     target_address: str | None = None, error: str | None = None) -> Delivery:
        return self._insert(_DELIVERIES, {"actor_cn": actor_cn, "selector": selector, "status": status,
                                          "target_address": target_address, "error": error})

    def update_delivery(self, delivery_id: int, *, actor_cn: str | None = None, status: str = UNSET,
                        target_address: str | None = UNSET, error: str | None = UNSET) -> Delivery:
        return self._update(_DELIVERIES, delivery_id, actor_cn,
                            {"status": status, "target_address": target_address, "error": error})

    def get_delivery(self, delivery_id: int, *, actor_cn: str | None = None) -> Delivery | None:
        return self._get(_DELIVERIES, delivery_id, actor_cn)

    def list_deliveries(self, actor_cn: str | None = None) -> list[Delivery]:
        return self._list(_DELIVERIES, actor_cn)

    def delete_delivery(self, delivery_id: int, *, actor_cn: str | None = None) -> bool:
        return self._delete(_DELIVERIES, delivery_id, actor_cn)

    # ---- local subscriptions

    def add_local_subscription(self, actor_cn: str, selector: str, *, status: str,
                               consumer_common_name: str | None = None,
                               error: str | None = None) -> LocalSubscription:
        return self._insert(_LOCAL_SUBS, {"actor_cn": actor_cn, "selector": selector, "status": status,
                                          "consumer_common_name": consumer_common_name, "endpoints": [],
                                          "error": error})

    def update_local_subscription(self, sub_id: int, *, actor_cn: str | None = None, status: str = UNSET,
                                  endpoints: Json = UNSET, error: str | None = UNSET) -> LocalSubscription:
        return self._update(_LOCAL_SUBS, sub_id, actor_cn, {"status": status, "endpoints": endpoints, "error": error})

    def get_local_subscription(self, sub_id: int, *, actor_cn: str | None = None) -> LocalSubscription | None:
        return self._get(_LOCAL_SUBS, sub_id, actor_cn)

    def list_local_subscriptions(self, actor_cn: str | None = None) -> list[LocalSubscription]:
        return self._list(_LOCAL_SUBS, actor_cn)

    def delete_local_subscription(self, sub_id: int, *, actor_cn: str | None = None) -> bool:
        return self._delete(_LOCAL_SUBS, sub_id, actor_cn)


# --------------------------------------------------------------------------- async facade

T = TypeVar("T")


class AsyncStore:
    """:class:`Store` for asyncio code: every call runs in ONE dedicated worker thread.

    The connection is created, used and closed in that thread only (so sqlite3's
    ``check_same_thread`` holds), and calls run one after the other in submission
    order. A cancelled await does not stop a call already running: its write still
    commits. Use ``async with AsyncStore(path) as store:`` or :meth:`open`/:meth:`close`.
    """

    def __init__(self, path: str | Path, *, create: bool = True, clock: Callable[[], int] = now_ms) -> None:
        self.path = path
        self._args = (path, create, clock)
        self._executor: ThreadPoolExecutor | None = None
        self._store: Store | None = None

    @classmethod
    def for_data_dir(cls, data_dir: str | Path, *, create: bool = True,
                     clock: Callable[[], int] = now_ms) -> AsyncStore:
        return cls(db_path(data_dir), create=create, clock=clock)

    async def open(self) -> AsyncStore:
        if self._executor is not None:
            raise StoreError("store already open")
        path, create, clock = self._args
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ii-store")
        try:
            self._store = await self._submit(lambda: Store(path, create=create, clock=clock))
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        return self

    async def close(self) -> None:
        executor, store = self._executor, self._store
        if executor is None:
            return
        self._executor = self._store = None
        try:
            if store is not None:
                await asyncio.get_running_loop().run_in_executor(executor, store.close)
        finally:
            executor.shutdown(wait=False)  # the close above was its last job

    async def __aenter__(self) -> AsyncStore:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _submit(self, fn: Callable[[], T]) -> T:
        if self._executor is None:
            raise StoreError("store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def call(self, fn: Callable[[Store], T]) -> T:
        """Run ``fn(store)`` in the worker thread, e.g. several writes in one ``store.transaction()``."""
        if self._store is None:
            raise StoreError("store is not open")
        store = self._store
        return await self._submit(lambda: fn(store))

    async def _run(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.call(lambda store: method(store, *args, **kwargs))

    # neighbours
    async def upsert_neighbours(self, neighbours: Iterable[Neighbour], *, seen_ms: int | None = None) -> None:
        return await self._run(Store.upsert_neighbours, list(neighbours), seen_ms=seen_ms)

    async def get_neighbour(self, name: str) -> StoredNeighbour | None:
        return await self._run(Store.get_neighbour, name)

    async def list_neighbours(self) -> list[StoredNeighbour]:
        return await self._run(Store.list_neighbours)

    async def delete_neighbour(self, name: str) -> bool:
        return await self._run(Store.delete_neighbour, name)

    # departed neighbours
    async def record_departure(self, name: str, *, departed_ms: int | None = None) -> int:
        return await self._run(Store.record_departure, name, departed_ms=departed_ms)

    async def list_departures(self) -> dict[str, int]:
        return await self._run(Store.list_departures)

    async def expire_departure(self, name: str) -> list[IncomingSubscription]:
        return await self._run(Store.expire_departure, name)

    # neighbour capabilities
    async def put_neighbour_capabilities(self, neighbour: str, document: Json, *,
                                         received_ms: int | None = None) -> NeighbourCapabilities:
        return await self._run(Store.put_neighbour_capabilities, neighbour, document, received_ms=received_ms)

    async def get_neighbour_capabilities(self, neighbour: str) -> NeighbourCapabilities | None:
        return await self._run(Store.get_neighbour_capabilities, neighbour)

    async def list_neighbour_capabilities(self) -> list[NeighbourCapabilities]:
        return await self._run(Store.list_neighbour_capabilities)

    async def delete_neighbour_capabilities(self, neighbour: str) -> bool:
        return await self._run(Store.delete_neighbour_capabilities, neighbour)

    # outgoing subscriptions
    async def add_outgoing_subscription(self, neighbour: str, selector: str, *, status: str,
                                        consumer_common_name: str | None = None) -> OutgoingSubscription:
        return await self._run(Store.add_outgoing_subscription, neighbour, selector, status=status,
                               consumer_common_name=consumer_common_name)

    async def update_outgoing_subscription(self, sub_id: int, *, status: str = UNSET,
                                           remote_id: str | None = UNSET, remote_path: str | None = UNSET,
                                           endpoints: Json = UNSET, error: str | None = UNSET) -> OutgoingSubscription:
        return await self._run(Store.update_outgoing_subscription, sub_id, status=status, remote_id=remote_id,
                               remote_path=remote_path, endpoints=endpoints, error=error)

    async def get_outgoing_subscription(self, sub_id: int) -> OutgoingSubscription | None:
        return await self._run(Store.get_outgoing_subscription, sub_id)

    async def list_outgoing_subscriptions(self, neighbour: str | None = None) -> list[OutgoingSubscription]:
        return await self._run(Store.list_outgoing_subscriptions, neighbour)

    async def delete_outgoing_subscription(self, sub_id: int) -> bool:
        return await self._run(Store.delete_outgoing_subscription, sub_id)

    # incoming subscriptions
    async def add_incoming_subscription(self, owner_cn: str, selector: str, *, status: str,
                                        consumer_common_name: str | None = None, source_address: str | None = None,
                                        granted: Iterable[str] | None = None) -> IncomingSubscription:
        return await self._run(Store.add_incoming_subscription, owner_cn, selector, status=status,
                               consumer_common_name=consumer_common_name, source_address=source_address,
                               granted=granted)

    async def update_incoming_subscription(self, sub_id: int, *, owner_cn: str | None = None, status: str = UNSET,
                                           endpoints: Json = UNSET, source_address: str | None = UNSET,
                                           error: str | None = UNSET,
                                           granted: Iterable[str] | None = UNSET) -> IncomingSubscription:
        return await self._run(Store.update_incoming_subscription, sub_id, owner_cn=owner_cn, status=status,
                               endpoints=endpoints, source_address=source_address, error=error, granted=granted)

    async def get_incoming_subscription(self, sub_id: int, *,
                                        owner_cn: str | None = None) -> IncomingSubscription | None:
        return await self._run(Store.get_incoming_subscription, sub_id, owner_cn=owner_cn)

    async def list_incoming_subscriptions(self, owner_cn: str | None = None) -> list[IncomingSubscription]:
        return await self._run(Store.list_incoming_subscriptions, owner_cn)

    async def delete_incoming_subscription(self, sub_id: int, *, owner_cn: str | None = None) -> bool:
        return await self._run(Store.delete_incoming_subscription, sub_id, owner_cn=owner_cn)

    # local capabilities
    async def add_local_capabilities(self, actor_cn: str,
                                     capabilities: Iterable[tuple[str, Json]]) -> list[LocalCapability]:
        return await self._run(Store.add_local_capabilities, actor_cn, list(capabilities))

    async def add_local_capability(self, actor_cn: str, publication_id: str, document: Json) -> LocalCapability:
        return await self._run(Store.add_local_capability, actor_cn, publication_id, document)

    async def update_local_capability(self, cap_id: int, document: Json, *,
                                      actor_cn: str | None = None) -> LocalCapability:
        return await self._run(Store.update_local_capability, cap_id, document, actor_cn=actor_cn)

    async def get_local_capability(self, cap_id: int, *, actor_cn: str | None = None) -> LocalCapability | None:
        return await self._run(Store.get_local_capability, cap_id, actor_cn=actor_cn)

    async def find_local_capability(self, publication_id: str) -> LocalCapability | None:
        return await self._run(Store.find_local_capability, publication_id)

    async def list_local_capabilities(self, actor_cn: str | None = None) -> list[LocalCapability]:
        return await self._run(Store.list_local_capabilities, actor_cn)

    async def delete_local_capability(self, cap_id: int, *, actor_cn: str | None = None) -> bool:
        return await self._run(Store.delete_local_capability, cap_id, actor_cn=actor_cn)

    # deliveries
    async def add_delivery(self, actor_cn: str, selector: str, *, status: str,
                           target_address: str | None = None, error: str | None = None) -> Delivery:
        return await self._run(Store.add_delivery, actor_cn, selector, status=status,
                               target_address=target_address, error=error)

    async def update_delivery(self, delivery_id: int, *, actor_cn: str | None = None, status: str = UNSET,
                              target_address: str | None = UNSET, error: str | None = UNSET) -> Delivery:
        return await self._run(Store.update_delivery, delivery_id, actor_cn=actor_cn, status=status,
                               target_address=target_address, error=error)

    async def get_delivery(self, delivery_id: int, *, actor_cn: str | None = None) -> Delivery | None:
        return await self._run(Store.get_delivery, delivery_id, actor_cn=actor_cn)

    async def list_deliveries(self, actor_cn: str | None = None) -> list[Delivery]:
        return await self._run(Store.list_deliveries, actor_cn)

    async def delete_delivery(self, delivery_id: int, *, actor_cn: str | None = None) -> bool:
        return await self._run(Store.delete_delivery, delivery_id, actor_cn=actor_cn)

    # local subscriptions
    async def add_local_subscription(self, actor_cn: str, selector: str, *, status: str,
                                     consumer_common_name: str | None = None,
                                     error: str | None = None) -> LocalSubscription:
        return await self._run(Store.add_local_subscription, actor_cn, selector, status=status,
                               consumer_common_name=consumer_common_name, error=error)

    async def update_local_subscription(self, sub_id: int, *, actor_cn: str | None = None, status: str = UNSET,
                                        endpoints: Json = UNSET, error: str | None = UNSET) -> LocalSubscription:
        return await self._run(Store.update_local_subscription, sub_id, actor_cn=actor_cn, status=status,
                               endpoints=endpoints, error=error)

    async def get_local_subscription(self, sub_id: int, *, actor_cn: str | None = None) -> LocalSubscription | None:
        return await self._run(Store.get_local_subscription, sub_id, actor_cn=actor_cn)

    async def list_local_subscriptions(self, actor_cn: str | None = None) -> list[LocalSubscription]:
        return await self._run(Store.list_local_subscriptions, actor_cn)

    async def delete_local_subscription(self, sub_id: int, *, actor_cn: str | None = None) -> bool:
        return await self._run(Store.delete_local_subscription, sub_id, actor_cn=actor_cn)
