"""``interchange federation up|down|status``: a test federation operators can start and point the kit at.

N interchanges (default 3) ``ixc-<k>.<domain>``, each an ``interchange broker`` process with its own
address and the same ports (its own network namespace when root, :mod:`interop_kit.netns`, else
its own loopback address), dnsmasq serving their SRV and A records (IP_085-087) and the kit's
identity (IP_126), a PKI with two intermediates (appendix E figure 14), and the demo's datasets at
node 1, so the command ``up`` prints (:func:`kit_command`) runs every check. State is in
``<dir>/federation.json``; ``down`` stops only the processes it recorded (checking each pid still
runs its command). The layout in full: docs/interop-kit.md.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from certs import create_test_pki
from certs.pki import Pki
from interchange.ground.ports import free_port
from interop_kit import badcerts
from interop_kit.demo_data import demo_traffic, register_demo_datasets
from interop_kit.netns import Network, NetnsError, available, network_for

STATE_FILE = "federation.json"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
EXEC_RETRIES = 100  #: reads of an empty command line before a process counts as not ours
EXEC_RETRY_S = 0.01
KIT_HOST = "kit"
ACTOR = "actor-1"  #: registers the demo's datasets and a delivery at node 1, for the kit's CREATED and BI checks
INTERMEDIATES = ("ca-1", "ca-2")
LOOPBACK_NOTE = "network namespaces not used ({why}): each node has its own loopback address"
Isolation = Literal["auto", "netns", "loopback"]


class FederationError(Exception):
    """The federation cannot be started, found or stopped; the message says why."""


class NodeState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    address: str
    ii_port: int
    amqps_port: int
    config: str
    log: str
    pid: int | None = None
    namespace: str | None = None  #: the node's network namespace (netns isolation)


class FederationState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    directory: str
    domain: str
    mode: str
    network: Network | None = None  #: the namespaces' names and subnet (netns isolation)
    dns_port: int
    dns_pid: int | None = None
    kit_name: str
    pki: str
    nodes: list[NodeState]
    delivery_address: str | None = None


def load_state(directory: Path) -> FederationState:
    path = directory / STATE_FILE
    try:
        return FederationState.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FederationError(f"no federation in {directory} ({STATE_FILE} missing): run `federation up` first") from None
    except ValueError as exc:
        raise FederationError(f"{path} is not a federation state file: {exc}") from None


def save_state(state: FederationState) -> None:
    path = Path(state.directory) / STATE_FILE
    path.write_text(state.model_dump_json(indent=2) + "\n", encoding="utf-8")


def _process_state(pid: int) -> str:
    """The state letter in ``/proc/<pid>/stat`` (R, S, Z...); the command name before it may hold spaces."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def _running(pid: int | None, marker: str) -> bool:
    """Whether ``pid`` is alive and still runs a command containing ``marker`` (not a reused pid).

    A node's command line reads empty for an instant while ``ip netns exec`` replaces itself with
    Python (the new program's arguments are not set up yet), and for good once it is a zombie: an
    empty one is read again until the exec is over, so a starting node is not taken for a dead one.
    """
    if pid is None:
        return False
    for _ in range(EXEC_RETRIES):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if command:
                return marker.encode() in command
            if _process_state(pid) in ("Z", "X"):  # dead, not yet reaped
                return False
        except (OSError, IndexError):
            return False
        time.sleep(EXEC_RETRY_S)
    return False


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _pki(directory: Path, names: list[str], kit: str) -> Pki:
    """The PKI with both intermediates, readied for the kit's refusal checks before any node loads its CRLs."""
    odd, even = names[0::2], names[1::2]
    create_test_pki(directory, odd, [ACTOR], intermediate=INTERMEDIATES[0], exist_ok=True)
    create_test_pki(directory, [*even, kit], [], intermediate=INTERMEDIATES[1], exist_ok=True)
    badcerts.prepare(directory)
    return Pki(directory)


def _dnsmasq(directory: Path, domain: str, nodes: list[NodeState], kit: str,
             network: Network | None) -> tuple[int, int]:
    binary = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
    if not Path(binary).exists():
        raise FederationError("dnsmasq is missing (Debian package dnsmasq-base; scripts/setup.sh installs it)")
    lines = [f"local=/{domain}/"]
    lines += [f"srv-host=_ixc._tcp.{domain},{n.name},{n.ii_port},10,10" for n in nodes]
    lines += [f"host-record={n.name},{n.address}" for n in nodes]
    lines += [f"srv-host=_ixc._tcp.{domain},{kit},1,10,10", f"host-record={kit},127.0.0.1"]
    conf = directory / "dnsmasq.conf"
    conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    port = free_port()
    listen = "127.0.0.1" + (f",{network.gateway}" if network is not None else "")
    command = [binary, "--keep-in-foreground", f"--port={port}", f"--listen-address={listen}", "--bind-interfaces",
               "--no-resolv", "--no-hosts", "--no-poll", f"--conf-file={conf}", f"--log-facility={directory / 'dnsmasq.log'}"]
    if os.geteuid() == 0:
        command += ["--user=root", "--group=root"]
    with (directory / "dnsmasq.stderr").open("wb") as stderr:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                   start_new_session=True)
    return port, process.pid


def _node_config(node: NodeState, home: Path, pki: Pki, domain: str, dns: tuple[str, int]) -> dict[str, Any]:
    identity = pki.identity(node.name)
    return {
        "name": node.name, "data_dir": str(home / "var"),
        "tls": {"cert_chain": str(identity.chain), "key": str(identity.key), "trust_bundle": str(pki.trust_bundle),
                "crls": [str(c) for c in pki.crl_paths()]},
        "broker": {"host": node.address, "port": node.amqps_port},
        "log": {"path": str(home / "node.log"), "level": "info"},
        "ii": {"host": node.address, "port": node.ii_port, "public_host": node.address, "retry_min_s": 0.1,
               "retry_max_s": 2.0, "discovery": {"dns_server": dns[0], "dns_port": dns[1],
                                                   "domains": [domain], "interval_s": 60}},
    }


def spawn_node(node: NodeState) -> int:
    with Path(node.log).with_name("stdout.log").open("wb") as out:
        inside = ["ip", "netns", "exec", node.namespace] if node.namespace is not None else []
        process = subprocess.Popen([*inside, sys.executable, "-m", "interchange", "broker", "--config", node.config],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return process.pid


def wait_up(state: FederationState) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    for node in state.nodes:
        while not (_listening(node.address, node.ii_port) and _listening(node.address, node.amqps_port)):
            if not _running(node.pid, node.config):
                tail = Path(node.log).with_name("stdout.log").read_text(errors="replace")[-2000:]
                raise FederationError(f"{node.name} exited during start-up:\n{tail}")
            if time.monotonic() > deadline:
                raise FederationError(f"{node.name} not listening on {node.address} within {START_TIMEOUT_S:g} s")
            time.sleep(0.1)


def _isolation(directory: Path, isolation: Isolation) -> tuple[Network | None, str]:
    """The namespaces to use (None: loopback addresses) and the mode note ``status`` prints."""
    if isolation != "loopback":
        why = available()
        if why is None:
            network = network_for(directory)
            return network, (f"network namespaces: node k in {network.namespace(1)[:-1]}<k> at "
                             f"{network.subnet}.<k>, bridge {network.bridge} ({network.gateway})")
        if isolation == "netns":
            raise FederationError(f"network namespaces are not available here: {why}")
        return None, LOOPBACK_NOTE.format(why=why)
    return None, LOOPBACK_NOTE.format(why="--isolation loopback")


def _nodes(directory: Path, names: list[str], network: Network | None, prefix: str, ii_port: int,
           amqps_port: int) -> list[NodeState]:
    nodes = []
    for k, name in enumerate(names, start=1):
        home = directory / name
        shutil.rmtree(home / "var", ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        nodes.append(NodeState(name=name, address=network.address(k) if network else f"{prefix}.{k}",
                               namespace=network.namespace(k) if network else None, ii_port=ii_port,
                               amqps_port=amqps_port, config=str(home / "node.json"), log=str(home / "node.log")))
    return nodes


def up(directory: Path, count: int = 3, *, domain: str = "federation.test", prefix: str = "127.0.10",
       ii_port: int = 8443, amqps_port: int = 5671, isolation: Isolation = "auto",
       settings: dict[str, Any] | None = None) -> FederationState:
    """Start the federation in ``directory`` (PKI kept across runs, node state fresh); ``settings``
    are merged into every node's config (e.g. ``{"ii": {"federation_idle_timeout_s": 5}}``)."""
    directory = directory.resolve()
    if (directory / STATE_FILE).exists():
        old = load_state(directory)
        if any(_running(n.pid, n.config) for n in old.nodes) or _running(old.dns_pid, "dnsmasq"):
            raise FederationError(f"a federation is running in {directory}: run `federation down` first")
    if not 1 <= count <= 50:
        raise FederationError("--nodes must be between 1 and 50")
    names = [f"ixc-{k}.{domain}" for k in range(1, count + 1)]
    kit = f"{KIT_HOST}.{domain}"
    directory.mkdir(parents=True, exist_ok=True)
    pki = _pki(directory / "pki", names, kit)
    network, mode = _isolation(directory, isolation)
    nodes = _nodes(directory, names, network, prefix, ii_port, amqps_port)
    state = FederationState(directory=str(directory), domain=domain, mode=mode, network=network, dns_port=0,
                            kit_name=kit, pki=str(pki.directory), nodes=nodes)
    try:
        if network is not None:
            save_state(state)  # down() can remove the namespaces from here on
            try:
                network.setup(count)
            except NetnsError as exc:
                raise FederationError(f"network namespaces could not be set up: {exc}") from None
        state.dns_port, state.dns_pid = _dnsmasq(directory, domain, nodes, kit, network)
        save_state(state)
        _start_nodes(state, pki, settings or {})
    except BaseException:
        down(directory)
        raise
    return state


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra``'s keys, tables merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = _merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def _start_nodes(state: FederationState, pki: Pki, settings: dict[str, Any]) -> None:
    """Write each node's config, start it, wait until all listen, register actor-1's demo datasets."""
    directory = Path(state.directory)
    dns_host = state.network.gateway if state.network is not None else "127.0.0.1"
    for node in state.nodes:
        config = _merged(_node_config(node, Path(node.config).parent, pki, state.domain, (dns_host, state.dns_port)),
                         settings)
        Path(node.config).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        node.pid = spawn_node(node)
        save_state(state)
    wait_up(state)
    first = state.nodes[0]
    state.delivery_address = asyncio.run(register_demo_datasets(directory, ACTOR, first.name, first.ii_port,
                                                                first.address))
    traffic = demo_traffic()
    (directory / "traffic.json").write_text(json.dumps({"selector": traffic.selector, "matching": traffic.matching,
                                                        "mismatching": traffic.mismatching}, indent=2) + "\n")
    save_state(state)


def _stop(pid: int | None, marker: str) -> None:
    if not _running(pid, marker):
        return
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _running(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _running(pid, marker):
        os.kill(pid, signal.SIGKILL)


def down(directory: Path) -> FederationState:
    """Stop the recorded nodes (SIGTERM, SIGKILL after STOP_TIMEOUT_S) and dnsmasq."""
    state = load_state(directory.resolve())
    for node in reversed(state.nodes):
        _stop(node.pid, node.config)
        node.pid = None
    _stop(state.dns_pid, "dnsmasq")
    state.dns_pid = None
    if state.network is not None:
        state.network.teardown(len(state.nodes))
    save_state(state)
    return state


def status_rows(state: FederationState) -> list[tuple[str, str, str, str]]:
    """(name, address, process, listening) per node, and one row for the DNS server."""
    rows = []
    for node in state.nodes:
        alive = _running(node.pid, node.config)
        ports = [f"{p}" for p in (node.ii_port, node.amqps_port) if alive and _listening(node.address, p)]
        rows.append((node.name, node.address, f"pid {node.pid}" if alive else "stopped",
                     f"II {node.ii_port}, AMQPS {node.amqps_port}" if len(ports) == 2 else "not listening"))
    dns_alive = _running(state.dns_pid, "dnsmasq")
    rows.append((f"dnsmasq (_ixc._tcp.{state.domain})", "127.0.0.1", f"pid {state.dns_pid}" if dns_alive else "stopped",
                 f"DNS {state.dns_port}" if dns_alive else "not listening"))
    return rows


def all_up(state: FederationState) -> bool:
    return all(not row[3].startswith("not") for row in status_rows(state))


def kit_command(state: FederationState, node: NodeState) -> list[str]:
    """The `interchange interop` command line checking ``node`` as the kit's neighbour identity."""
    identity = Path(state.pki) / "issued" / state.kit_name
    return ["interchange", "interop", "--name", node.name, "--ii-url", f"https://{node.name}:{node.ii_port}",
            "--bi", f"amqps://{node.name}:{node.amqps_port}", "--address", node.address,
            "--trust", str(Path(state.pki) / "trust.pem"), "--cert", str(identity / "chain.pem"),
            "--key", str(identity / "key.pem"), "--domain", state.domain,
            "--dns-server", f"127.0.0.1:{state.dns_port}", "--pki", state.pki, *_delivery_options(state, node)]


def _delivery_options(state: FederationState, node: NodeState) -> list[str]:
    if state.delivery_address is None or node is not state.nodes[0]:
        return []
    actor = Path(state.pki) / "issued" / ACTOR
    return ["--delivery-address", state.delivery_address, "--delivery-cert", str(actor / "chain.pem"),
            "--delivery-key", str(actor / "key.pem"), "--traffic", str(Path(state.directory) / "traffic.json")]
