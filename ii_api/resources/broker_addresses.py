"""The II's use of the broker's addresses: the sources and targets it makes, and where they are
advertised (one endpoint per broker process, :mod:`interchange.broker.placement`).

Sources serve subscriptions (IP_109 scopes), targets serve deliveries. The II names every
address it makes with an ``ii-`` prefix (config-file addresses must not have one).
"""
from __future__ import annotations

import secrets
from collections.abc import Sequence

from ii_api.resources.doors import AddressBookDoor
from ii_api.wire.models import LocalEndpoint
from interchange.broker.addresses import AddressError, SourceSpec, TargetSpec
from interchange.broker.placement import Placement

__all__ = ["BrokerAddresses"]


class BrokerAddresses:
    """Sources and targets in the broker's address book, and their advertised endpoints."""

    def __init__(self, book: AddressBookDoor, amqp_host: str, amqp_ports: Sequence[int],
                 placement: Placement = Placement()) -> None:
        self.book = book
        self.amqp_host = amqp_host
        self.amqp_ports = tuple(amqp_ports)  #: advertised AMQPS port of broker process 0..N-1
        self.placement = placement

    @staticmethod
    def new_address(prefix: str) -> str:
        """A fresh broker address for a source or target the II makes (``prefix`` starts "ii-")."""
        return prefix + secrets.token_hex(8)

    def open_source(self, spec: SourceSpec) -> str | None:
        """Create (or replace) a source; the reason when the address book refuses it (an address a
        configured target took, a selector nested too deeply), None when done."""
        try:
            self.book.put_source(spec)
        except AddressError as exc:
            return f"the source could not be created: {exc}"
        return None

    def open_target(self, spec: TargetSpec) -> str | None:
        """Create (or replace) a target; the reason when the address book refuses it, None when done."""
        try:
            self.book.put_target(spec)
        except AddressError as exc:
            return f"the target could not be created: {exc}"
        return None

    def has_target(self, address: str) -> bool:
        return self.book.target(address) is not None

    def remove_source(self, address: str | None) -> None:
        if address and self.book.source(address) is not None:
            self.book.remove(address)

    def remove_target(self, address: str | None) -> None:
        if address and self.book.target(address) is not None:
            self.book.remove(address)

    def local_endpoints(self, source: str) -> list[LocalEndpoint]:
        """Where to consume from ``source``: one endpoint per broker process, as advertised now."""
        return [LocalEndpoint(host=self.amqp_host, port=port, source=source) for port in self.amqp_ports]

    def target_port(self, target: str) -> int:
        """The advertised port of the broker process that serves ``target``."""
        spec = self.book.target(target)
        return self.amqp_ports[self.placement.owner_of(target, spec.process if spec is not None else None)]
