"""SQLite persistence of the Improved Interface's state (embedded, one file in the data directory).

Neighbours (IP_073/089) and their capabilities (IP_076), subscriptions to and from neighbours
(IP_078/079), and local actors' capabilities (IP_077), deliveries and subscriptions.
:class:`Store` is the synchronous API; :class:`AsyncStore` runs it in one dedicated thread so the
event loop never waits on the disk. WAL with ``synchronous=FULL``: a write that returned is on disk.
Every write is one transaction (:meth:`Store.transaction` groups several). Migrations
(:data:`MIGRATIONS`) apply on open; ids are never reused (they appear in polled paths);
``read_only=True`` never migrates and reads while the node writes. More: docs/improved-interface.md
("State").
"""
from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ii_api.peers.discovery import Neighbour
from interchange.ground.timing import now_ms

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import DataclassInstance

DB_FILENAME = "ii.sqlite3"

Json = Any
"""A JSON-serialisable value (dict, list, str, int, float, bool, None)."""


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

R = TypeVar("R", bound="DataclassInstance")  # a row: a frozen dataclass


@dataclass(frozen=True)
class _Table(Generic[R]):
    """How one resource's rows are kept: its SQLite table, row type, owner column and JSON columns."""

    name: str
    row: type[R]
    owner: str | None = None  # column an owner filter applies to
    json: frozenset[str] = frozenset()
    id_lists: frozenset[str] = frozenset()  # JSON columns holding a set of ids, stored as a sorted list

    @functools.cached_property
    def columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.row))

    def decode(self, row: sqlite3.Row) -> R:
        return self.row(**{c: json.loads(row[c]) if c in self.json and row[c] is not None else row[c]
                           for c in self.columns})

    def encode(self, values: dict[str, Any]) -> dict[str, Any]:
        """Column values for SQLite: JSON columns dumped (None stays NULL), enum members as their value.
        A name that is not a column is a programming error (names are spliced into SQL: never input)."""
        unknown = set(values) - set(self.columns)
        if unknown:
            raise TypeError(f"{self.name} has no column {', '.join(sorted(unknown))}")
        values = {c: _id_list(v) if c in self.id_lists else v for c, v in values.items()}
        return {c: _dump(v) if c in self.json and v is not None else _text(v) for c, v in values.items()}


_OUTGOING = _Table("outgoing_subscriptions", OutgoingSubscription, "neighbour", frozenset({"endpoints"}))
_INCOMING = _Table("incoming_subscriptions", IncomingSubscription, "owner_cn", frozenset({"endpoints", "granted"}),
                   frozenset({"granted"}))
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


# --------------------------------------------------------------------------- repositories

class _Connection(Protocol):
    """What a repository needs of its :class:`Store`: the connection, the clock, write transactions."""

    @property
    def conn(self) -> sqlite3.Connection: ...

    def now(self) -> int: ...

    def write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...


class Table(Generic[R]):
    """The rows of one resource (subscriptions, deliveries, capabilities), by id, optionally scoped to
    an owner (the neighbour or actor whose row it is: another owner's id is "not found").

    ``add``/``update`` take column values by name; ``update`` leaves out columns not given (None
    clears one). ``created_ms``/``last_updated_ms`` are kept by the table."""

    def __init__(self, db: _Connection, table: _Table[R]) -> None:
        self._db = db
        self._table = table

    def add(self, **values: Any) -> R:
        now = self._db.now()
        row = self._table.encode({**values, "created_ms": now, "last_updated_ms": now})
        with self._db.write() as conn:
            columns, marks = ", ".join(row), ", ".join("?" * len(row))
            cursor = conn.execute(f"INSERT INTO {self._table.name} ({columns}) VALUES ({marks})", tuple(row.values()))
            return self._require(int(cursor.lastrowid or 0), None)

    def get(self, row_id: int, owner: str | None = None) -> R | None:
        where, params = self._where(row_id, owner)
        found = self._db.conn.execute(f"SELECT * FROM {self._table.name} WHERE {where}", params).fetchone()
        return None if found is None else self._table.decode(found)

    def list(self, owner: str | None = None) -> builtins.list[R]:
        table = self._table
        if owner is None:
            rows = self._db.conn.execute(f"SELECT * FROM {table.name} ORDER BY id").fetchall()
        else:
            rows = self._db.conn.execute(f"SELECT * FROM {table.name} WHERE {table.owner} = ? ORDER BY id",
                                         (owner,)).fetchall()
        return [table.decode(r) for r in rows]

    def update(self, row_id: int, owner: str | None = None, **changes: Any) -> R:
        """Change the given columns; :class:`NotFoundError` if there is no such row (of ``owner``)."""
        if self._table.owner in changes or "id" in changes:
            raise TypeError(f"the id and owner of a {self._table.name} row never change")
        values = self._table.encode({**changes, "last_updated_ms": self._db.now()})
        where, params = self._where(row_id, owner)
        with self._db.write() as conn:
            cursor = conn.execute(f"UPDATE {self._table.name} SET {', '.join(f'{c} = ?' for c in values)} "
                                  f"WHERE {where}", (*values.values(), *params))
            if cursor.rowcount == 0:
                raise self._not_found(row_id, owner)
            return self._require(row_id, None)

    def delete(self, row_id: int, owner: str | None = None) -> bool:
        where, params = self._where(row_id, owner)
        with self._db.write() as conn:
            return conn.execute(f"DELETE FROM {self._table.name} WHERE {where}", params).rowcount > 0

    def delete_owned_by(self, owner: str) -> builtins.list[R]:
        """Every row of ``owner`` deleted; the rows as they were."""
        with self._db.write() as conn:
            rows = self.list(owner)
            conn.execute(f"DELETE FROM {self._table.name} WHERE {self._table.owner} = ?", (owner,))
            return rows

    def _where(self, row_id: int, owner: str | None) -> tuple[str, tuple[Any, ...]]:
        if owner is None:
            return "id = ?", (row_id,)
        return f"id = ? AND {self._table.owner} = ?", (row_id, owner)

    def _require(self, row_id: int, owner: str | None) -> R:
        found = self.get(row_id, owner)
        if found is None:
            raise self._not_found(row_id, owner)
        return found

    def _not_found(self, row_id: int, owner: str | None) -> NotFoundError:
        return NotFoundError(f"no {self._table.name} row with id {row_id}" + (f" for {owner}" if owner else ""))


class CapabilityTable(Table[LocalCapability]):
    """Local actors' capabilities (IP_077): a publicationId is unique across the network."""

    def add(self, **values: Any) -> LocalCapability:
        """Register a capability; :class:`DuplicatePublicationIdError` when its publicationId is taken."""
        try:
            return super().add(**values)
        except StoreError as exc:
            if "local_capabilities.publication_id" in str(exc):
                raise DuplicatePublicationIdError(values.get("publication_id", "")) from None
            raise

    def add_all(self, actor_cn: str, capabilities: Iterable[tuple[str, Json]]) -> builtins.list[LocalCapability]:
        """Register (publicationId, document) pairs of ``actor_cn``: all of them or none."""
        with self._db.write():
            return [self.add(actor_cn=actor_cn, publication_id=publication_id, document=document)
                    for publication_id, document in capabilities]

    def find(self, publication_id: str) -> LocalCapability | None:
        found = self._db.conn.execute("SELECT * FROM local_capabilities WHERE publication_id = ?",
                                      (publication_id,)).fetchone()
        return None if found is None else self._table.decode(found)


class NeighbourTable:
    """Neighbours found by discovery (IP_073/089), and those that left DNS since (IP_126)."""

    def __init__(self, db: _Connection) -> None:
        self._db = db

    def upsert(self, neighbours: Iterable[Neighbour], *, seen_ms: int | None = None) -> None:
        """Record neighbours found by discovery; ``first_seen_ms`` is kept, the rest replaced. A
        neighbour found again is no longer departed."""
        seen = self._db.now() if seen_ms is None else seen_ms
        rows = [(n.name, n.host, n.port, n.domain, n.priority, n.weight, seen, seen) for n in neighbours]
        with self._db.write() as conn:
            conn.executemany("DELETE FROM departed_neighbours WHERE name = ?", [(r[0],) for r in rows])
            conn.executemany(
                """INSERT INTO neighbours (name, host, port, domain, priority, weight, first_seen_ms, last_seen_ms)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (name) DO UPDATE SET host = excluded.host, port = excluded.port,
                       domain = excluded.domain, priority = excluded.priority, weight = excluded.weight,
                       last_seen_ms = excluded.last_seen_ms""", rows)

    def get(self, name: str) -> StoredNeighbour | None:
        found = self._db.conn.execute("SELECT * FROM neighbours WHERE name = ?", (name,)).fetchone()
        return None if found is None else StoredNeighbour(**dict(found))

    def list(self) -> builtins.list[StoredNeighbour]:
        rows = self._db.conn.execute("SELECT * FROM neighbours ORDER BY domain, name").fetchall()
        return [StoredNeighbour(**dict(r)) for r in rows]

    def delete(self, name: str) -> bool:
        """Forget a neighbour and its capabilities document (its subscriptions stay)."""
        with self._db.write() as conn:
            conn.execute("DELETE FROM neighbour_capabilities WHERE neighbour = ?", (name,))
            return conn.execute("DELETE FROM neighbours WHERE name = ?", (name,)).rowcount > 0

    def record_departure(self, name: str, *, departed_ms: int | None = None) -> int:
        """Forget a neighbour that left DNS (as :meth:`delete`) and note since when it is gone; an
        earlier departure is kept. Returns the departure time."""
        with self._db.write() as conn:
            self.delete(name)
            conn.execute("INSERT INTO departed_neighbours (name, departed_ms) VALUES (?, ?) ON CONFLICT (name) "
                         "DO NOTHING", (name, self._db.now() if departed_ms is None else departed_ms))
            return int(conn.execute("SELECT departed_ms FROM departed_neighbours WHERE name = ?",
                                    (name,)).fetchone()[0])

    def departures(self) -> dict[str, int]:
        """Departed neighbours and the time each left (ms since the epoch)."""
        return {r[0]: r[1] for r in self._db.conn.execute("SELECT name, departed_ms FROM departed_neighbours")}

    def forget_departure(self, name: str) -> None:
        with self._db.write() as conn:
            conn.execute("DELETE FROM departed_neighbours WHERE name = ?", (name,))


class NeighbourCapabilityTable:
    """The latest capabilities document each neighbour sent (IP_076)."""

    def __init__(self, db: _Connection) -> None:
        self._db = db

    def put(self, neighbour: str, document: Json, *, received_ms: int | None = None) -> NeighbourCapabilities:
        """Replace the capabilities document of ``neighbour``."""
        received = self._db.now() if received_ms is None else received_ms
        with self._db.write() as conn:
            conn.execute(
                """INSERT INTO neighbour_capabilities (neighbour, document, received_ms) VALUES (?, ?, ?)
                   ON CONFLICT (neighbour) DO UPDATE SET document = excluded.document,
                       received_ms = excluded.received_ms""", (neighbour, _dump(document), received))
        return NeighbourCapabilities(neighbour, json.loads(_dump(document)), received)

    def get(self, neighbour: str) -> NeighbourCapabilities | None:
        found = self._db.conn.execute("SELECT * FROM neighbour_capabilities WHERE neighbour = ?",
                                      (neighbour,)).fetchone()
        return None if found is None else NeighbourCapabilities(found[0], json.loads(found[1]), found[2])

    def list(self) -> builtins.list[NeighbourCapabilities]:
        rows = self._db.conn.execute("SELECT * FROM neighbour_capabilities ORDER BY neighbour").fetchall()
        return [NeighbourCapabilities(r[0], json.loads(r[1]), r[2]) for r in rows]

    def delete(self, neighbour: str) -> bool:
        with self._db.write() as conn:
            return conn.execute("DELETE FROM neighbour_capabilities WHERE neighbour = ?", (neighbour,)).rowcount > 0


# --------------------------------------------------------------------------- sync store

class Store:
    """The II database over one SQLite connection, used from one thread.

    ``path`` is the database file (``":memory:"`` for a throw-away one); with
    ``create=False`` a missing file is a :class:`StoreError` instead of a new database.
    Each resource is one repository on it: :attr:`neighbours` (and departures),
    :attr:`neighbour_capabilities`, :attr:`outgoing`, :attr:`incoming`, :attr:`capabilities`,
    :attr:`deliveries`, :attr:`local_subscriptions`.
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
        self.neighbours = NeighbourTable(self)
        self.neighbour_capabilities = NeighbourCapabilityTable(self)
        self.outgoing: Table[OutgoingSubscription] = Table(self, _OUTGOING)
        self.incoming: Table[IncomingSubscription] = Table(self, _INCOMING)
        self.capabilities = CapabilityTable(self, _CAPABILITIES)
        self.deliveries: Table[Delivery] = Table(self, _DELIVERIES)
        self.local_subscriptions: Table[LocalSubscription] = Table(self, _LOCAL_SUBS)

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
    def conn(self) -> sqlite3.Connection:
        return self._conn

    def now(self) -> int:
        """The store's clock (milliseconds since the epoch)."""
        return self._clock()

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
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (joining an outer one); SQLite errors become :class:`StoreError`."""
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

    def expire_departure(self, name: str) -> list[IncomingSubscription]:
        """A departed neighbour's grace period is over: its subscriptions here and its departure record
        go, in one transaction. Returns the subscriptions deleted (their sources are the caller's)."""
        with self.transaction():
            rows = self.incoming.delete_owned_by(name)
            self.neighbours.forget_departure(name)
            return rows


# --------------------------------------------------------------------------- async facade

T = TypeVar("T")


class AsyncStore:
    """:class:`Store` for asyncio code: every call runs in ONE dedicated worker thread.

    The connection is created, used and closed in that thread only (so sqlite3's
    ``check_same_thread`` holds), and calls run one after the other in submission
    order. A cancelled await does not stop a call already running: its write still
    commits. Use ``async with AsyncStore(path) as store:`` or :meth:`open`/:meth:`close`.

    There is one call path, :meth:`call`; :class:`AsyncTable` (one per row resource, e.g.
    ``store.incoming``) is :class:`Table` through it.
    """

    def __init__(self, path: str | Path, *, create: bool = True, clock: Callable[[], int] = now_ms) -> None:
        self.path = path
        self._args = (path, create, clock)
        self._executor: ThreadPoolExecutor | None = None
        self._store: Store | None = None
        self.outgoing = AsyncTable(self, lambda store: store.outgoing)
        self.incoming = AsyncTable(self, lambda store: store.incoming)
        self.capabilities = AsyncTable(self, lambda store: store.capabilities)
        self.deliveries = AsyncTable(self, lambda store: store.deliveries)
        self.local_subscriptions = AsyncTable(self, lambda store: store.local_subscriptions)

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


class AsyncTable(Generic[R]):
    """A :class:`Table` used from asyncio code: each method is the table's, run by :meth:`AsyncStore.call`."""

    def __init__(self, store: AsyncStore, table: Callable[[Store], Table[R]]) -> None:
        self._store = store
        self._table = table

    async def add(self, **values: Any) -> R:
        return await self._store.call(lambda s: self._table(s).add(**values))

    async def get(self, row_id: int, owner: str | None = None) -> R | None:
        return await self._store.call(lambda s: self._table(s).get(row_id, owner))

    async def list(self, owner: str | None = None) -> builtins.list[R]:
        return await self._store.call(lambda s: self._table(s).list(owner))

    async def update(self, row_id: int, owner: str | None = None, **changes: Any) -> R:
        return await self._store.call(lambda s: self._table(s).update(row_id, owner, **changes))

    async def delete(self, row_id: int, owner: str | None = None) -> bool:
        return await self._store.call(lambda s: self._table(s).delete(row_id, owner))

    async def batch(self, fn: Callable[[Table[R]], T]) -> T:
        """``fn(table)`` in one transaction (several rows written together, or none)."""
        def run(store: Store) -> T:
            with store.transaction():
                return fn(self._table(store))
        return await self._store.call(run)
