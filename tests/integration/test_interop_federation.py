"""The federation harness: `interchange federation up|status|down` with three real node
processes each in its own network namespace (or, asked to, on its own loopback address), real
dnsmasq, a PKI with two intermediates; the kit, run with the command line `up` prints, passes every
check against node 1."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from cryptography import x509

from interchange.app.cli import build_parser
from interop_kit.catalogue import all_checks
from interop_kit.cli import target_from_args
from interop_kit.federation import load_state
from interop_kit.model import Outcome
from interop_kit.runner import run_checks

def _federation(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interchange", "federation", *args], capture_output=True, text=True,
                          timeout=120)


def _issuer(chain: Path) -> str:
    return x509.load_pem_x509_certificates(chain.read_bytes())[0].issuer.rfc4514_string()


def _net_namespace(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout


async def test_up_check_with_the_kit_and_down(tmp_path: Path) -> None:
    directory = tmp_path / "federation"
    prefix = f"127.{random.randint(20, 250)}.{random.randint(1, 250)}"  # not shared with a parallel run
    started = _federation("up", "--dir", str(directory), "--prefix", prefix, "--isolation", "loopback")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "network namespaces not used (--isolation loopback)" in started.stdout
        assert started.stdout.count("AMQPS 5671") == 3 and "interchange interop --name ixc-1.federation.test" in started.stdout
        state = load_state(directory)
        assert [n.address for n in state.nodes] == [f"{prefix}.1", f"{prefix}.2", f"{prefix}.3"]
        pki = Path(state.pki)
        assert _issuer(pki / "issued" / "ixc-1.federation.test" / "chain.pem") != \
            _issuer(pki / "issued" / "ixc-2.federation.test" / "chain.pem")  # two intermediates (appendix E)
        command = next(line.strip() for line in started.stdout.splitlines() if "interchange interop" in line)
        args = build_parser().parse_args(command.split()[1:])
        target = target_from_args(args)
        work = tmp_path / "kit"
        work.mkdir()
        report = await run_checks(all_checks(), target, work, timeout_s=30)  # actor-1's datasets: BI traffic too
        problems = [f"{r.name}: {r.message}" for r in report.results if r.outcome is not Outcome.PASSED]
        assert problems == [] and len(report.results) == len(all_checks())
        assert _federation("status", "--dir", str(directory)).returncode == 0
    finally:
        stopped = _federation("down", "--dir", str(directory))
    assert stopped.returncode == 1 and stopped.stdout.count("stopped") == 4, stopped.stdout + stopped.stderr
    again = _federation("down", "--dir", str(directory))
    assert again.returncode == 1  # idempotent: nothing left to stop, status says so


async def test_nodes_in_their_own_network_namespaces(tmp_path: Path) -> None:
    """Each node in its own namespace with its own 10.x.y.k address on a bridge: they find each other
    through DNS and federate; the kit, from the test's namespace, passes every check; down removes the
    namespaces and the bridge."""
    directory = tmp_path / "federation"
    started = _federation("up", "--dir", str(directory), "--isolation", "netns")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        state = load_state(directory)
        assert state.network is not None and "network namespaces: node k in" in started.stdout
        assert [n.address for n in state.nodes] == [f"{state.network.subnet}.{k}" for k in (1, 2, 3)]
        spaces = {_net_namespace(n.pid or 0) for n in state.nodes}
        assert len(spaces) == 3 and _net_namespace("self") not in spaces
        assert all(n.namespace and n.namespace in _namespaces() for n in state.nodes)
        command = next(line.strip() for line in started.stdout.splitlines() if "interchange interop" in line)
        report = await run_checks(all_checks(), target_from_args(build_parser().parse_args(command.split()[1:])),
                                  tmp_path, timeout_s=30)
        problems = [f"{r.name}: {r.message}" for r in report.results if r.outcome is not Outcome.PASSED]
        assert problems == []
        discovered = (Path(state.nodes[1].log)).read_text()
        assert '"ii_neighbours_changed"' in discovered and state.nodes[0].name in discovered  # DNS from inside
    finally:
        stopped = _federation("down", "--dir", str(directory))
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert state.network.bridge not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert not any(n.namespace in _namespaces() for n in state.nodes if n.namespace)


def test_status_without_federation_is_a_clear_error(tmp_path: Path) -> None:
    result = _federation("status", "--dir", str(tmp_path / "none"))
    assert result.returncode == 2 and "run `federation up` first" in result.stderr
