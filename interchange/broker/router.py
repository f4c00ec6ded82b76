"""The broker core (sans-I/O): authorizes links, validates and routes messages to sources.

It implements the :class:`interchange.broker.engine.Router` interface for connection engines
and reacts to :class:`~interchange.broker.addresses.AddressBook` changes made by config or the II.
With a :class:`~interchange.broker.durable.Durability`, durable messages are stored before they are
accepted and come back after a restart, and are refused before routing while the store
cannot write (full disk); without one every message is memory-only.

What the core derives from a message's application properties alone (whether a publisher's target
accepts them; which sources' node selectors take them, by ``federated``) is kept by the properties
object (:data:`DERIVED` of each): the admission gives every message of the same properties section
the same read-only dict (:mod:`interchange.broker.admission`), so a publication's messages are
checked and routed once per section, not once per message. Kept with the object (its id is no
other's while kept), from the second message of a section on (a section seen once, as every
message of distinct properties is, is not kept); forgotten when a target or source changes.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol, cast

import jms_selectors
from jms_selectors.ast import Literal
from interchange.broker.addresses import AddressBook, Origin, Scope, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.amqp_scan import ScanError, header_durable, quick_header_durable
from interchange.broker.coverage import CoverageMatcher
from interchange.broker.durable import Durability
from interchange.broker.engine import AttachRefused, Rejected, StoreReceipt
from interchange.broker.hop_trace import Drop, HopGuard
from interchange.broker.import_duplicates import ImportDuplicates, bare_digest
from interchange.broker.link_selectors import LinkSelectors, SelectorTooLarge
from interchange.broker.memory import BufferLimits, MemoryBudget
from interchange.broker.message import BrokerMessage
from interchange.broker.observer import LATENCY_SAMPLE, BrokerObserver, DeliveryLink
from interchange.broker.placement import Placement
from interchange.broker.routing_index import RoutingIndex
from interchange.broker.source import ConsumerLink, LossObserver, Source
from interchange.ground.timing import now_ms


Acceptor = Callable[[dict], bool]  #: whether a target accepts a message (its application properties)
#: properties objects whose verdict (per publisher link) and routes (per core) are kept, at most
DERIVED = 1024


def target_acceptor(spec: TargetSpec, previous: CoverageMatcher | None = None) -> tuple[Acceptor | None,
                                                                                         CoverageMatcher | None]:
    """What ``spec`` accepts: its selector and its coverage both (None: everything); and its
    coverage's matcher (built from ``previous``, the target's last one, where they share fits)."""
    selector = _matches(spec.selector) if spec.selector else None
    coverage = CoverageMatcher(spec.coverage, previous) if spec.coverage is not None else None
    if selector is None or coverage is None:
        return selector or coverage, coverage
    return (lambda properties: selector(properties) and coverage(properties)), coverage


def _matches(text: str) -> Callable[[Mapping[str, object]], bool] | None:
    """A selector's test; None when it is the literal TRUE (what a delivery for all of its actor's
    capabilities says, IP_077, however written: ``true``, ``(TRUE)``): it matches every message, so
    it is not evaluated for each one."""
    compiled = jms_selectors.compile(text)
    return None if compiled.ast == Literal(True) else compiled.matches


class ConsumerLinkState(ConsumerLink, DeliveryLink, Protocol):
    """A consumer's link as the core sees it: the engine's (AMQP) or the in-process door's
    (:class:`~interchange.broker.local_door.LocalConsumer`)."""


class PublisherLink:
    """A publisher's link on a target (what the router knows of it: who, which target, how to close it)."""

    __slots__ = ("identity", "spec", "federated", "_matches", "_verdicts", "closer")

    def __init__(self, identity: str, spec: TargetSpec, matches: Acceptor | None) -> None:
        self.identity = identity
        self.spec = spec
        self.federated = spec.origin is Origin.FEDERATED
        self._matches = matches
        #: id(properties) -> (properties, whether the target accepts them), for :data:`DERIVED` objects
        self._verdicts: dict[int, tuple[dict, bool]] = {}
        self.closer: Callable[[str, str], None] | None = None

    @property
    def matches(self) -> Acceptor | None:
        return self._matches

    @matches.setter
    def matches(self, matches: Acceptor | None) -> None:
        self._matches = matches
        self._verdicts = {}

    def accepts(self, properties: dict, keep: bool = True) -> bool:
        """Whether the target takes a message of these properties (its acceptor's verdict, kept per
        object when ``keep``: the admission saw the section before)."""
        matches = self._matches
        if matches is None:
            return True
        known = self._verdicts.get(id(properties))
        if known is not None and known[0] is properties:
            return known[1]
        verdict = bool(matches(properties))
        if not keep:
            return verdict
        if len(self._verdicts) >= DERIVED:
            self._verdicts.clear()
        self._verdicts[id(properties)] = (properties, verdict)
        return verdict


class _DurableLosses:
    """A source's loss observer that also releases lost durable messages from the store."""

    __slots__ = ("observer", "durability")

    def __init__(self, observer: LossObserver, durability: Durability) -> None:
        self.observer = observer
        self.durability = durability

    def dropped(self, message: BrokerMessage, source: str, reason: str) -> None:
        self.observer.dropped(message, source, reason)
        if message.holders is not None:
            self.durability.release(message, source)

    def expired_in(self, message: BrokerMessage, source: str) -> None:
        self.observer.expired_in(message, source)
        if message.holders is not None:
            self.durability.release(message, source)


class BrokerCore:
    """Routing state of one broker process."""

    def __init__(
        self,
        addresses: AddressBook,
        admission: Admission,
        observer: BrokerObserver | None = None,
        clock_ms: Callable[[], int] = now_ms,
        placement: Placement = Placement(),
        hops: HopGuard | None = None,
        durability: Durability | None = None,
        duplicates: ImportDuplicates | None = None,
        buffers: BufferLimits = BufferLimits(),
    ) -> None:
        self.addresses = addresses
        self.buffers = buffers  #: the sources' byte limits (IP_032's floor checked at start)
        #: the node's budget across the sources (this process's share; interchange.broker.memory)
        self.budget = MemoryBudget(buffers.node_max_bytes)
        #: second copies of imported messages kept from sources (multi-hop route changes)
        self.duplicates = duplicates
        self.durability = durability  #: durable messages stored and recovered; None: memory only
        self.hops = hops  #: loop prevention for imported messages (multi-hop federation, IP_109)
        self.placement = placement
        self.admission = admission
        self.observer = observer or BrokerObserver()
        self._losses: LossObserver = (self.observer if durability is None
                                      else _DurableLosses(self.observer, durability))
        self.clock_ms = clock_ms
        self.sources: dict[str, Source] = {}
        self._publishers: dict[str, set[PublisherLink]] = {}
        #: each target's acceptor, built once per spec (a coverage may hold thousands of capabilities),
        #: and its coverage matcher (kept while the target is: the next version reuses it)
        self._acceptors: dict[str, tuple[TargetSpec, Acceptor | None]] = {}
        self._coverages: dict[str, CoverageMatcher] = {}
        self._index = RoutingIndex()
        #: id(properties) -> (properties, the sources routed to), for a message published (0) and an
        #: imported one (1: no LOCAL source); emptied when a source changes (:data:`DERIVED` each)
        self._routes: tuple[dict[int, tuple[dict, tuple[Source, ...]]], ...] = ({}, {})
        self.link_selectors = LinkSelectors()  #: bounded, cached link selector compilation
        addresses.subscribe(self._on_address_change)
        for spec in addresses.sources.values():
            self._on_address_change("source", spec.address, spec)

    # ------------------------------------------------------------ address book changes
    def _on_address_change(self, kind: str, address: str, spec: TargetSpec | SourceSpec | None) -> None:
        if kind == "source":
            for routes in self._routes:
                routes.clear()
            old = self.sources.get(address)
            if spec is None:
                if old is not None:
                    self._index.remove(old)
                    del self.sources[address]
                    old.clear("source_deleted")  # each buffered message is logged as dropped
                    for link in list(old.links):
                        link.close("amqp:resource-deleted", f"source {address!r} was deleted")
                return
            assert isinstance(spec, SourceSpec)
            node_selector = jms_selectors.compile(spec.selector) if spec.selector else None
            source = Source(spec, node_selector.matches if node_selector else None, self._losses, self.buffers,
                            self.budget)
            if old is not None:
                self._index.remove(old)
                source.adopt(old)
                for link in list(source.links):
                    if link.identity not in spec.consumers:
                        source.remove_link(link)
                        link.close("amqp:unauthorized-access", "consumer grant withdrawn")
            self.sources[address] = source
            self._index.add(source, node_selector.ast if node_selector else None)
            if old is None and self.durability is not None:
                now = self.clock_ms()
                for message in self.durability.waiting_for(address):  # recovered, in their order
                    source.offer(message, now)
        else:
            target = cast("TargetSpec | None", spec)  # kind "target"
            self._acceptors.pop(address, None)
            if target is None:
                self._coverages.pop(address, None)
            for publisher in list(self._publishers.get(address, ())):
                allowed = target is not None and publisher.identity in target.publishers
                if not allowed and publisher.closer is not None:
                    publisher.closer("amqp:resource-deleted" if spec is None else "amqp:unauthorized-access",
                                       f"target {address!r} was deleted or the grant withdrawn")
                elif target is not None:
                    publisher.spec, publisher.matches = target, self._acceptor(target)
                    publisher.federated = target.origin is Origin.FEDERATED

    def _acceptor(self, spec: TargetSpec) -> Acceptor | None:
        cached = self._acceptors.get(spec.address)
        if cached is None or cached[0] is not spec:
            acceptor, coverage = target_acceptor(spec, self._coverages.get(spec.address))
            if coverage is not None:
                self._coverages[spec.address] = coverage
            cached = self._acceptors[spec.address] = (spec, acceptor)
        return cached[1]

    # ------------------------------------------------------------ Router interface
    def attach_publisher(self, identity: str, address: str | None) -> PublisherLink:
        """Authorize a publisher's link on a target (IP_050: identity is the TLS certificate CN)."""
        if not address:
            raise AttachRefused("amqp:invalid-field", "a publisher link needs a target address")
        spec = self.addresses.target(address)
        if spec is None:
            raise AttachRefused("amqp:not-found", f"no target {address!r}")
        if not self.placement.owns(spec):
            raise AttachRefused("amqp:not-found", f"target {address!r} is served by broker process "
                                f"{self.placement.owner(spec)} of this node (another port; the II's endpoint names it)")
        if identity not in spec.publishers:
            raise AttachRefused("amqp:unauthorized-access", f"{identity!r} may not publish to {address!r}")
        publisher = PublisherLink(identity, spec, self._acceptor(spec))
        self._publishers.setdefault(address, set()).add(publisher)
        self.observer.link_attached("publisher", identity, address, None)
        return publisher

    def detach_publisher(self, publisher: PublisherLink) -> None:
        self._publishers.get(publisher.spec.address, set()).discard(publisher)
        self.observer.link_detached("publisher", publisher.identity, publisher.spec.address)

    def attach_consumer(self, identity: str, address: str | None, selector: str | None, link: ConsumerLinkState) -> Source:
        """Authorize a consumer on a source and compile its link selector (IP_024/066/067)."""
        if not address:
            raise AttachRefused("amqp:invalid-field", "a consumer link needs a source address")
        source = self.sources.get(address)
        if source is None:
            raise AttachRefused("amqp:not-found", f"no source {address!r}")
        if identity not in source.spec.consumers:
            raise AttachRefused("amqp:unauthorized-access", f"{identity!r} may not consume from {address!r}")
        if selector is not None:
            try:
                link.selector = self.link_selectors.compile(selector).matches
            except (jms_selectors.SelectorError, SelectorTooLarge) as exc:
                raise AttachRefused("amqp:invalid-field", str(exc)) from None
        link.source = source
        source.add_link(link)
        self.observer.link_attached("consumer", identity, address, selector)
        return source

    def detach_consumer(self, link: ConsumerLinkState) -> None:
        source = link.source
        if source is not None:
            source.remove_link(link)
            # Messages sent but not settled by the consumer go back to the front of the buffer.
            if link.unsettled:
                self.observer.link_lost(link)
                source.requeue(list(link.unsettled.values()))
                link.unsettled.clear()
            self.observer.link_detached("consumer", link.identity, source.spec.address)
            if self.sources.get(source.spec.address) is source:
                source.credit_changed(self.clock_ms())

    def redeliver(self, link: ConsumerLinkState, message: BrokerMessage) -> None:
        """A consumer released or modified a delivery: it goes back to the front of its source."""
        source = link.source
        if source is not None and self.sources.get(source.spec.address) is source:
            source.requeue([message])
            source.credit_changed(self.clock_ms())

    def credit_available(self, link: ConsumerLinkState) -> None:
        source = link.source
        if source is not None:
            source.credit_changed(self.clock_ms())

    def consumed(self, link: ConsumerLinkState, message: BrokerMessage) -> None:
        """A consumer settled a durable message (or took it on a pre-settled link): its source is done with it."""
        source = link.source
        if source is not None and self.durability is not None:
            self.durability.release(message, source.spec.address)

    def publish(self, publisher: PublisherLink, raw: bytes | bytearray) -> StoreReceipt | None:
        """Validate and route one message; raise Rejected for a malformed one (IP_016).

        Returns the store's commit a durable message waits for (accept it once that is done),
        None when the message is settled now."""
        observer = self.observer
        timed = observer.received_count % LATENCY_SAMPLE == 0
        if timed:
            started = time.perf_counter()
        now = self.clock_ms()
        address = publisher.spec.address
        try:
            message = self.admission.admit(raw, publisher.identity, publisher.federated,
                                           publisher.spec.shard_count, now)
        except Rejected as exc:
            observer.rejected(publisher.identity, address, raw, exc.description, self.admission.number_rejected(),
                              publisher.federated)
            raise
        repeated = self.admission.repeated
        if not publisher.accepts(message.properties, repeated):
            refusal = Rejected("message does not fit the capabilities registered for this target")
            observer.rejected(publisher.identity, address, raw, refusal.description, message.seq,
                              publisher.federated, message)
            raise refusal
        durability = self.durability if self.durability is not None and quick_header_durable(raw) else None
        if durability is not None:
            durability.check_writable()  # a store that cannot write: refused here, not routed
        observer.received(message, address)
        if message.expiry_ms is not None and message.expiry_ms <= now:
            observer.expired_on_arrival(message, address)
            return None
        if durability is not None:
            message.holders = set()
        self._route(message, now, address, repeated)
        if timed:
            observer.routing_latency(time.perf_counter() - started)
        return durability.store_routed(message) if message.holders is not None and durability is not None else None

    def publish_all(self, publisher: PublisherLink, raws: Iterable[bytes | bytearray]
                    ) -> list[StoreReceipt | Rejected | None]:
        """:meth:`publish` for each of ``raws`` in order (an in-process publisher's read), one clock reading for
        all; in each one's place the store's commit, None (settled now) or the :class:`Rejected` it would raise.
        A run of one properties object has the target's verdict and its sources looked up once, its ``received``
        counted once while records are off, and its memory-only messages for one source offered together."""
        observer, admission, durability = self.observer, self.admission, self.durability
        now = self.clock_ms()
        address, identity, federated = publisher.spec.address, publisher.identity, publisher.federated
        shard_count, admit, accepts = publisher.spec.shard_count, admission.admit, publisher.accepts
        each = observer.records_received()
        answers: list[StoreReceipt | Rejected | None] = []
        run: dict | None = None  # the run's properties object, verdict, sources, count and first message
        run_ok, run_targets, run_count, run_first = False, None, 0, cast(BrokerMessage, None)
        batch: list[BrokerMessage] = []  # memory-only messages of the run for its one source, in order
        for raw in raws:
            started = time.perf_counter() if (observer.received_count + run_count) % LATENCY_SAMPLE == 0 else None
            try:
                message = admit(raw, identity, federated, shard_count, now)
            except Rejected as exc:
                observer.rejected(identity, address, raw, exc.description, admission.number_rejected(), federated)
                answers.append(exc)
                continue
            properties = message.properties
            if properties is not run:  # (a new run: what the last one counted is added first)
                batch = self._offer_batch(batch, now, run_targets)
                if run_count:
                    observer.received_run(run_first, run_count)
                repeated = admission.repeated
                run, run_ok, run_targets, run_count, run_first = properties, accepts(properties, repeated), None, 0, message
            if not run_ok:
                refusal = Rejected("message does not fit the capabilities registered for this target")
                observer.rejected(identity, address, raw, refusal.description, message.seq, federated, message)
                answers.append(refusal)
                continue
            durable = durability if durability is not None and quick_header_durable(raw) else None
            if durable is not None and (unwritable := _unwritable(durable)) is not None:
                answers.append(unwritable)  # (a store that cannot write: refused here, not routed)
                continue
            if each:
                observer.received(message, address)
            else:
                run_count += 1
            if message.expiry_ms is not None and message.expiry_ms <= now:
                observer.expired_on_arrival(message, address)
                answers.append(None)
                continue
            if run_targets is None:
                run_targets = self._targets_of(properties, federated, admission.repeated)
            if durable is None and started is None and len(run_targets) == 1:
                batch.append(message)
                answers.append(None)
                continue
            batch = self._offer_batch(batch, now, run_targets)
            answers.append(self._offer_one(message, now, address, run_targets, durable, started))
        self._offer_batch(batch, now, run_targets)
        if run_count:
            observer.received_run(run_first, run_count)
        return answers

    def _offer_one(self, message: BrokerMessage, now: int, address: str, targets: tuple[Source, ...],
                   durable: Durability | None, started: float | None) -> StoreReceipt | None:
        """:meth:`_offer` of one message of :meth:`publish_all`, the node's memory budget enforced after it,
        and its routing latency taken when it is sampled (``started``: its perf_counter on arrival)."""
        receipt = self._offer(message, now, address, targets, durable)
        if self.budget.used > self.budget.limit:
            self._enforce_budget()
        if started is not None:
            self.observer.routing_latency(time.perf_counter() - started)
        return receipt

    def _offer_batch(self, batch: list[BrokerMessage], now: int, targets: tuple[Source, ...] | None
                     ) -> list[BrokerMessage]:
        """:meth:`_offer` of each memory-only message of ``batch`` (none: nothing) to the one source of
        ``targets``, in order (:meth:`Source.offer_all`), the node's memory budget enforced after them;
        a new empty batch."""
        if not batch:
            return batch
        assert targets is not None and len(targets) == 1
        targets[0].offer_all(batch, now)
        self.observer.routed_count += len(batch)
        if self.budget.used > self.budget.limit:
            self._enforce_budget()
        return []

    def _offer(self, message: BrokerMessage, now: int, address: str, targets: tuple[Source, ...],
               durable: Durability | None) -> StoreReceipt | None:
        """:meth:`_route`'s offers to ``targets`` (the sources already found), and the store's commit
        of a durable message."""
        if durable is not None:
            holders = message.holders = set()
            for source in targets:
                holders.add(source.spec.address)
                source.offer(message, now)
        else:
            for source in targets:
                source.offer(message, now)
        if targets:
            self.observer.routed_count += 1
        else:
            self.observer.routed(0, message, address)
        return durable.store_routed(message) if durable is not None else None

    def _targets_of(self, properties: dict, federated: bool, keep: bool) -> tuple[Source, ...]:
        """The sources :meth:`_route` offers a message of ``properties`` to (kept by the object when ``keep``)."""
        routes = self._routes[federated]
        known = routes.get(id(properties))
        if known is not None and known[0] is properties:
            return known[1]
        targets = self._targets(properties, federated)
        if keep:
            if len(routes) >= DERIVED:
                routes.clear()
            routes[id(properties)] = (properties, targets)
        return targets

    def publish_imported(self, raw: bytes, neighbour: str, only: Iterable[str] | None = None) -> StoreReceipt | None:
        """Route a message received from another interchange's source (federation).

        It is validated like any other and marked as imported, so it only reaches sources of
        scope ``all`` and is never served on to a third interchange (IP_109). With a hop guard
        (:mod:`interchange.broker.hop_trace`), one that looped back or went over its hop limit is
        dropped and counted, and the others get this interchange in their trace. With ``only``, it is
        offered to those source addresses alone (still subject to their node selectors): the II
        uses that to give what one of its subscriptions imports to the local subscriptions it
        was made for, and to nobody twice; with :attr:`duplicates`, not to a source that got the
        same bare message over another route lately either. A durable one is stored like a
        published one: the returned commit says when (settle upstream after it).
        """
        now = self.clock_ms()
        verdict = None
        try:
            if self.hops is not None:
                try:
                    verdict = self.hops.inspect(raw, neighbour)
                except ScanError as exc:
                    raise Rejected(f"message annotations: {exc}") from None
            routed_raw = verdict.raw if verdict is not None and not isinstance(verdict, Drop) else raw
            message = self.admission.admit(routed_raw, neighbour, True, None, now)
        except Rejected as exc:
            self.observer.rejected(neighbour, "(federation)", raw, exc.description, self.admission.number_rejected(),
                                   True)
            raise
        address = f"federation:{neighbour}"
        self.observer.received(message, address)
        if isinstance(verdict, Drop):
            self.observer.hop_dropped(message, address, verdict.reason, verdict.trace)
            return None
        if message.expiry_ms is not None and message.expiry_ms <= now:
            self.observer.expired_on_arrival(message, address)
            return None
        durability = self.durability
        if durability is not None and header_durable(routed_raw):
            message.holders = set()
            if durability.is_duplicate_import(routed_raw) and self.observer.log is not None:
                self.observer.log.event("info", "duplicate_import", {"neighbour": neighbour, "seq": message.seq,
                                                                     "count": durability.duplicate_imports})
        if only is None:
            self._route(message, now, address, self.admission.repeated)
        else:
            digest = None if self.duplicates is None else bare_digest(
                routed_raw, verdict.bare_at if verdict is not None else -1)  # the hop guard found it
            self._route_only(message, now, address, only, digest)
        return durability.store_routed(message) if message.holders is not None and durability is not None else None

    def _route_only(self, message: BrokerMessage, now: int, address: str, only: Iterable[str],
                    digest: bytes | None) -> None:
        routed = 0
        properties = message.properties
        holders = message.holders
        for target in dict.fromkeys(only):
            source = self.sources.get(target)
            if source is None or source.spec.scope is not Scope.ALL:
                continue  # IP_109: never towards another interchange
            if source.node_selector is None or source.node_selector(properties):
                if digest is not None and not self._first_copy(message, target, digest, now):
                    continue
                if holders is not None:
                    holders.add(target)
                source.offer(message, now)
                routed += 1
        self.observer.routed(routed, message, address)
        if self.budget.used > self.budget.limit:
            self._enforce_budget()

    def _first_copy(self, message: BrokerMessage, target: str, digest: bytes, now: int) -> bool:
        """Whether source ``target`` gets its first copy of the imported ``message`` (a second one,
        over another route, is counted and logged instead)."""
        assert self.duplicates is not None
        if self.duplicates.first(target, digest, now):
            return True
        self.observer.duplicate_dropped(message, target)
        return False

    def _route(self, message: BrokerMessage, now: int, address: str, keep: bool = True) -> None:
        """Offer ``message`` to every source whose node selector takes it (the sources kept by its
        properties object when ``keep``: the admission saw its section before)."""
        targets = self._targets_of(message.properties, message.federated, keep)
        holders = message.holders  # a durable message: which sources hold it
        for source in targets:
            if holders is not None:
                holders.add(source.spec.address)
            source.offer(message, now)
        self.observer.routed(len(targets), message, address)
        if self.budget.used > self.budget.limit:
            self._enforce_budget()

    def _targets(self, properties: dict, federated: bool) -> tuple[Source, ...]:
        """The sources whose node selector takes these properties (to keep)."""
        return tuple(self._taking(properties, federated))

    def _taking(self, properties: dict, federated: bool) -> Iterator[Source]:
        """The sources whose node selector takes these properties, one by one."""
        for source in self._index.candidates(properties):
            if federated and source.spec.scope is Scope.LOCAL:
                continue  # IP_109: imported data is never served to a third interchange
            residual = source.residual  # the node selector less what the index already matched
            if residual is None or residual(properties):
                yield source

    def _enforce_budget(self) -> None:
        """The sources hold more than the node's budget: the fullest give up their oldest messages
        (each logged as dropped, ``node_memory``), and one ``memory_budget`` record says how many."""
        budget = self.budget
        before = budget.used
        evicted = budget.enforce(self.sources.values())
        self.observer.budget_enforced(evicted, before, budget)

    # ------------------------------------------------------------ housekeeping
    def held(self) -> dict[str, dict[str, int]]:
        """Per source with messages buffered: how many are durable (back after a restart) and
        memory-only (lost by one); logged at shutdown."""
        held = {}
        for address, source in self.sources.items():
            durable, memory_only = source.held()
            if durable or memory_only:
                held[address] = {"durable": durable, "memory_only": memory_only}
        return held

    def expire(self) -> int:
        """Drop expired messages from every source (IP_033); return how many."""
        now = self.clock_ms()
        dropped = sum(source.expire(now) for source in self.sources.values())
        if dropped:
            self.observer.expired(dropped)
        if self.durability is not None:
            self.durability.purge(now)
        return dropped


def _unwritable(durability: Durability) -> Rejected | None:
    """The refusal of a durable message while the store cannot write (:meth:`Durability.check_writable`)."""
    try:
        durability.check_writable()
    except Rejected as exc:
        return exc
    return None
