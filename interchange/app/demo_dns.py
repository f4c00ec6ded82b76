"""A tiny authoritative DNS server for the demo: SRV and A records on a loopback UDP port.

The demo's interchanges discover each other exactly as in production (IP_073/086: SRV records of
``_ixc._tcp.<domain>`` and the A records of their targets, looked up with dnspython), but from
this server, so the demo needs no DNS set-up. Not for production: it answers only what it was
given, over UDP, and NXDOMAIN for everything else in its zone.
"""
from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset


@dataclass(frozen=True)
class SrvRecord:
    """``_ixc._tcp.<domain>`` -> ``target:port``."""

    domain: str
    target: str
    port: int


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, server: DemoDns) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            query = dns.message.from_wire(data)
        except dns.exception.DNSException:
            return
        assert self.transport is not None
        self.transport.sendto(self.server.answer(query).to_wire(), addr)


class DemoDns:
    """Serves SRV records for the IXC service and A records for their targets."""

    def __init__(self, srv: Sequence[SrvRecord], hosts: Mapping[str, str]) -> None:
        self.srv = list(srv)
        self.hosts = {name.lower().rstrip("."): address for name, address in hosts.items()}
        self.zones = {r.domain.lower().rstrip(".") for r in self.srv}
        self.port: int | None = None
        self._transport: asyncio.DatagramTransport | None = None

    def answer(self, query: dns.message.Message) -> dns.message.Message:
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if len(query.question) != 1:
            response.set_rcode(dns.rcode.FORMERR)
            return response
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True).lower()
        if question.rdtype == dns.rdatatype.SRV:
            records = [r for r in self.srv if name == f"_ixc._tcp.{r.domain.lower().rstrip('.')}"]
            if records:
                response.answer.append(dns.rrset.from_text_list(
                    question.name, 60, "IN", "SRV", [f"10 10 {r.port} {r.target.rstrip('.')}." for r in records]))
                return response
        elif question.rdtype == dns.rdatatype.A and name in self.hosts:
            response.answer.append(dns.rrset.from_text(question.name, 60, "IN", "A", self.hosts[name]))
            return response
        known = name in self.hosts or any(name == f"_ixc._tcp.{z}" for z in self.zones)
        if not known:
            response.set_rcode(dns.rcode.NXDOMAIN if any(name.endswith(z) for z in self.zones) else dns.rcode.REFUSED)
        return response  # known name, other type: no data

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), local_addr=(host, port))
        self._transport = transport
        self.port = int(transport.get_extra_info("sockname")[1])
        return self.port

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
