"""Network namespaces for the federation harness: each node in its own ``ip netns`` with
its own address, as on separate hosts.

One Linux bridge in the caller's namespace (``ixb-<tag>``, address ``<subnet>.254``) joins a veth
pair per node: the host end on the bridge, the other end (``eth0``) in the node's namespace
``ixc-<tag>-<k>`` with ``<subnet>.<k>/24``. Nodes reach each other and the bridge address (where
the DNS server also listens) over the bridge; the caller (the kit, the tests) reaches every node
at its address. The names derive from a tag (a hash of the federation's directory), so ``down``
and a later ``up`` find what an earlier run left behind.

Needs root (CAP_NET_ADMIN) and iproute2; :func:`available` says whether this machine allows it.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NetnsError", "Network", "available", "network_for"]


class NetnsError(Exception):
    """A namespace, veth or bridge command failed; the message has the command and its error."""


@dataclass(frozen=True)
class Network:
    """The names and addresses of one federation's namespaces."""

    tag: str
    subnet: str  #: the first three octets, e.g. "10.231.17"

    @property
    def bridge(self) -> str:
        return f"ixb-{self.tag}"

    @property
    def gateway(self) -> str:
        """The bridge's address: the DNS server listens here for the nodes."""
        return f"{self.subnet}.254"

    def namespace(self, k: int) -> str:
        return f"ixc-{self.tag}-{k}"

    def address(self, k: int) -> str:
        return f"{self.subnet}.{k}"

    def host_end(self, k: int) -> str:
        return f"ixv{self.tag}{k}"  # at most 15 characters (IFNAMSIZ) for k < 100

    def exec_prefix(self, k: int) -> list[str]:
        """The command prefix that runs a program in node ``k``'s namespace."""
        return [_ip(), "netns", "exec", self.namespace(k)]

    def setup_commands(self, count: int) -> list[list[str]]:
        ip = _ip()
        commands = [[ip, "link", "add", "name", self.bridge, "type", "bridge"],
                    [ip, "addr", "add", f"{self.gateway}/24", "dev", self.bridge],
                    [ip, "link", "set", self.bridge, "up"]]
        for k in range(1, count + 1):
            ns, host, inner = self.namespace(k), self.host_end(k), f"ixn{self.tag}{k}"
            commands += [[ip, "netns", "add", ns],
                         [ip, "link", "add", host, "type", "veth", "peer", "name", inner],
                         [ip, "link", "set", inner, "netns", ns],
                         [ip, "link", "set", host, "master", self.bridge],
                         [ip, "link", "set", host, "up"],
                         [ip, "-n", ns, "link", "set", inner, "name", "eth0"],
                         [ip, "-n", ns, "addr", "add", f"{self.address(k)}/24", "dev", "eth0"],
                         [ip, "-n", ns, "link", "set", "eth0", "up"],
                         [ip, "-n", ns, "link", "set", "lo", "up"]]
        return commands

    def teardown_commands(self, count: int) -> list[list[str]]:
        """Deleting a namespace deletes its veth end, and so the pair; then the bridge."""
        ip = _ip()
        return [[ip, "netns", "delete", self.namespace(k)] for k in range(1, count + 1)] + \
            [[ip, "link", "delete", self.bridge]]

    def setup(self, count: int) -> None:
        """Create the bridge and ``count`` namespaces; whatever an earlier run left is removed first."""
        self.teardown(count)
        try:
            for command in self.setup_commands(count):
                _run(command)
        except NetnsError:
            self.teardown(count)
            raise

    def teardown(self, count: int) -> None:
        """Remove what :meth:`setup` made (missing pieces are fine)."""
        for command in self.teardown_commands(count):
            subprocess.run(command, capture_output=True, check=False)


def _ip() -> str:
    return shutil.which("ip") or "/usr/sbin/ip"


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip() or f'exit {done.returncode}'}")


def network_for(directory: Path) -> Network:
    """Names and a 10.x.y.0/24 subnet derived from the federation's directory (stable across runs)."""
    digest = hashlib.sha1(str(directory.resolve()).encode()).digest()
    return Network(tag=digest[:2].hex(), subnet=f"10.{200 + digest[2] % 50}.{digest[3]}")


def available() -> str | None:
    """None if namespaces can be made here, else why not (for the harness's fallback note)."""
    if os.geteuid() != 0:
        return "not root (ip netns needs CAP_NET_ADMIN)"
    if not Path(_ip()).exists():
        return "iproute2 (ip) is missing"
    probe = f"ixc-probe-{os.getpid()}"
    done = subprocess.run([_ip(), "netns", "add", probe], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"ip netns add failed: {done.stderr.strip()}"
    subprocess.run([_ip(), "netns", "delete", probe], capture_output=True, check=False)
    return None
