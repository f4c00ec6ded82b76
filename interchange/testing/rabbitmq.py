"""A private RabbitMQ instance for the tests and the benchmarks (not part of a node): the benchmarks'
AMQP 1.0 peer, and the IF2 broker of the IF2 bridge's tests and benchmark.

Installs ``rabbitmq-server`` if missing (the system instance is never used), starts a private node
as a child process with everything in one temp dir and every listener on loopback, with a PKI TLS
1.3 and SASL EXTERNAL (user = the client certificate's CN), without one plain AMQP and SASL
ANONYMOUS; waits (bounded) until it is up; stops it (SIGTERM, then SIGKILL, then its epmd) so no
process is left behind. CPU: ``RabbitMQ.beam_pid``.

The Erlang VM's scheduler busy waiting (``busy_wait``, :data:`BUSY_WAIT`): how long an idle scheduler
spins before it sleeps (erl(1): ``+sbwt``, ``+sbwtdcpu``, ``+sbwtdio``). ``none`` by default, as
RabbitMQ's own start-up script sets it (rabbitmq-env, 3.10: ``RABBITMQ_SCHEDULER_BUSY_WAIT_THRESHOLD``
defaults to ``none``) and as its runtime tuning guide advises where the node shares its CPUs
(https://www.rabbitmq.com/docs/runtime, "Scheduler Busy Waiting": a spinning scheduler takes CPU time
the host's other processes need); ``erlang-default`` is the VM's own (``medium``, ``short``, ``short``),
busy waiting on. Passed explicitly either way; :meth:`RabbitMQ.start` checks what the running
``beam.smp`` was given. By hand:

    .venv/bin/python -m interchange.testing.rabbitmq [--pki DIR --cn broker.interchange.test --user actor-2]

Details: docs/testing.md ("A private RabbitMQ").
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from interchange.ground.ports import free_port

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # the real script, not /usr/sbin's su wrapper
RABBITMQCTL = RABBITMQ_SERVER.with_name("rabbitmqctl")
EPMD = "epmd"
PLUGINS = ("rabbitmq_amqp1_0", "rabbitmq_auth_mechanism_ssl")
#: The scheduler busy-wait thresholds by name: normal, dirty CPU and dirty I/O schedulers (erl(1)).
BUSY_WAIT: dict[str, dict[str, str]] = {
    "none": {"sbwt": "none", "sbwtdcpu": "none", "sbwtdio": "none"},  # RabbitMQ's start-up script's
    "erlang-default": {"sbwt": "medium", "sbwtdcpu": "short", "sbwtdio": "short"},  # the VM's own
}


def _service_active() -> bool:
    if shutil.which("systemctl") and subprocess.run(["systemctl", "is-active", "--quiet", "rabbitmq-server"],
                                                     capture_output=True).returncode == 0:
        return True
    init = Path("/etc/init.d/rabbitmq-server")
    return init.exists() and subprocess.run([str(init), "status"], capture_output=True, timeout=60).returncode == 0


def ensure_installed(log: Callable[[str], object] = print) -> None:
    """apt-get install rabbitmq-server if missing; stop and disable the service it may have started."""
    if RABBITMQ_SERVER.exists():
        return
    log("# installing rabbitmq-server (apt-get) for the RabbitMQ peer ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-q", "rabbitmq-server"], check=True, env=env,
                   stdout=subprocess.DEVNULL, timeout=900)
    if _service_active():  # the package starts its system-wide node where services may start
        log("# stopping and disabling the rabbitmq-server system service the package started")
        if shutil.which("systemctl"):
            subprocess.run(["systemctl", "stop", "rabbitmq-server"], timeout=120)
        else:
            subprocess.run(["/etc/init.d/rabbitmq-server", "stop"], timeout=120)
    if shutil.which("systemctl"):
        subprocess.run(["systemctl", "disable", "rabbitmq-server"], capture_output=True, timeout=60)


def version() -> str:
    for d in Path("/usr/lib/rabbitmq/lib").glob("rabbitmq_server-*"):
        return d.name.split("-", 1)[1]
    return "?"


class RabbitMQ:
    """One private RabbitMQ node. ``url`` is ``amqps://127.0.0.1:PORT`` (TLS) or ``amqp://...``."""

    def __init__(self, workdir: Path | None = None, pki_files: dict[str, Path] | None = None,
                 user: str = "guest", log: Callable[[str], object] = print, users: tuple[str, ...] = (),
                 busy_wait: str = "none") -> None:
        """pki_files: ``chain`` (server leaf + intermediates), ``key``, ``trust`` (CA bundle), or None
        for plain AMQP. ``user``: the client certificate's CN (SASL EXTERNAL) that must exist;
        ``users``: more of them. ``busy_wait``: a key of :data:`BUSY_WAIT`."""
        if busy_wait not in BUSY_WAIT:
            raise ValueError(f"busy_wait must be one of {', '.join(BUSY_WAIT)}, not {busy_wait!r}")
        self.busy_wait = busy_wait
        self.users = (user, *[u for u in users if u != user])
        self.own_dir = workdir is None
        self.dir = Path(tempfile.mkdtemp(prefix="bench-rabbitmq-")) if workdir is None else workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki_files = pki_files
        self.user = user
        self.log = log
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f"bench{self.port}@localhost"
        self.proc: subprocess.Popen | None = None
        self.epmd: subprocess.Popen | None = None
        self.beam_pid: int | None = None
        scheme = "amqps" if pki_files else "amqp"
        self.url = f"{scheme}://127.0.0.1:{self.port}"

    # -------------------------------------------------------------- configuration
    def _write_config(self) -> Path:
        d = self.dir
        lines = [
            "loopback_users = none",
            f"default_user = {self.user}",
            f"default_pass = {secrets.token_hex(16)}",  # never used: EXTERNAL checks the certificate
            "log.console = true",
            "log.console.level = info",
            "log.file = false",
            "vm_memory_high_watermark.relative = 0.6",
            "disk_free_limit.absolute = 50MB",
        ]
        if self.pki_files:
            # The CA file also lists the intermediates: Erlang builds its own chain from it.
            ca = d / "ca.pem"
            ca.write_bytes(Path(self.pki_files["trust"]).read_bytes() + Path(self.pki_files["chain"]).read_bytes())
            lines += [
                "listeners.tcp = none",
                f"listeners.ssl.1 = 127.0.0.1:{self.port}",
                f"ssl_options.cacertfile = {ca}",
                f"ssl_options.certfile = {self.pki_files['chain']}",
                f"ssl_options.keyfile = {self.pki_files['key']}",
                "ssl_options.verify = verify_peer",
                "ssl_options.fail_if_no_peer_cert = true",
                "ssl_options.depth = 4",
                "ssl_options.versions.1 = tlsv1.3",
                "auth_mechanisms.1 = EXTERNAL",
                "ssl_cert_login_from = common_name",
            ]
        else:
            lines += [
                f"listeners.tcp.1 = 127.0.0.1:{self.port}",
                "auth_mechanisms.1 = ANONYMOUS",
                "auth_mechanisms.2 = PLAIN",
                f"amqp1_0.default_user = {self.user}",
            ]
        if len(self.users) > 1:
            definitions = d / "definitions.json"
            definitions.write_text(json.dumps(_definitions(self.users)))
            lines.append(f"load_definitions = {definitions}")
        conf = d / "rabbitmq.conf"
        conf.write_text("\n".join(lines) + "\n")
        (d / "enabled_plugins").write_text("[" + ",".join(PLUGINS) + "].\n")
        (d / "rabbitmq-env.conf").write_text("")  # not /etc/rabbitmq's
        return conf

    def _env(self, conf: Path) -> dict[str, str]:
        d = self.dir
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update({
            "HOME": str(d),  # the Erlang cookie goes here
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_CONFIG_FILE": str(conf),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),  # absent
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(d / "rabbitmq.pid"),
            # the scheduler busy waiting (after the script's own flags: the VM takes the last of each);
            # the distribution listener on loopback; epmd: our own, private port, loopback
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": " ".join(f"+{flag} {value}" for flag, value
                                                            in BUSY_WAIT[self.busy_wait].items())
            + " -kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        })
        return env

    # -------------------------------------------------------------- lifetime
    def start(self, timeout: float = 90.0) -> "RabbitMQ":
        conf = self._write_config()
        env = self._env(conf)
        # our own epmd in the foreground (else erl would start a daemonised one that outlives the node)
        self.epmd = subprocess.Popen([EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        _wait_port(self.epmd_port, 10.0, self.epmd)
        self.console = (self.dir / "console.log").open("wb")
        self.proc = subprocess.Popen([str(RABBITMQ_SERVER)], env=env, cwd=self.dir, stdin=subprocess.DEVNULL,
                                     stdout=self.console, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        log_path = self.dir / "console.log"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"RabbitMQ exited ({self.proc.returncode}):\n{_tail(log_path)}")
            if b"Server startup complete" in log_path.read_bytes():
                break
            time.sleep(0.2)
        else:
            self.stop()
            raise RuntimeError(f"RabbitMQ did not start within {timeout:.0f} s:\n{_tail(log_path)}")
        _wait_port(self.port, max(1.0, deadline - time.monotonic()), self.proc)
        self.beam_pid = _find_beam(self.proc.pid)
        if self.beam_pid is None:
            self.stop()
            raise RuntimeError("RabbitMQ runs but its beam.smp process was not found")
        if (given := self.busy_wait_in_effect()) != BUSY_WAIT[self.busy_wait]:
            self.stop()
            raise RuntimeError(f"RabbitMQ's beam.smp runs with busy waiting {given}, not {self.busy_wait}'s")
        return self

    def busy_wait_in_effect(self) -> dict[str, str]:
        """The running ``beam.smp``'s scheduler busy-wait thresholds, from its command line."""
        assert self.beam_pid is not None, "the node is not running"
        return busy_wait_of(Path(f"/proc/{self.beam_pid}/cmdline").read_bytes().decode().split("\0"))

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; then our epmd. Idempotent."""
        if self.proc is not None:
            tree = _descendants(self.proc.pid)  # beam.smp, erl_child_setup, inet_gethost: by pid
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)  # the script forwards it to beam.smp and waits
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    if self.beam_pid:
                        _kill(self.beam_pid)
                    self.proc.kill()
                    self.proc.wait(10)
            deadline = time.monotonic() + 10.0
            for pid in tree:  # they exit with the node (inet_gethost a moment later); else SIGKILL
                _wait_gone(pid, max(0.1, deadline - time.monotonic()))
            self.proc = None
            self.console.close()
        if self.epmd is not None:
            if self.epmd.poll() is None:
                self.epmd.terminate()
                try:
                    self.epmd.wait(10)
                except subprocess.TimeoutExpired:
                    self.epmd.kill()
                    self.epmd.wait(10)
            self.epmd = None

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """``rabbitmqctl`` against this node (its node name, cookie and epmd port); its output, or
        RuntimeError with its error output."""
        assert self.proc is not None, "the node is not running"
        result = subprocess.run([str(RABBITMQCTL), "-n", self.node, *args], env=self._env(self.dir / "rabbitmq.conf"),
                                capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
        return result.stdout

    def import_definitions(self, definitions: dict, timeout: float = 30.0) -> None:
        """Load definitions as an operator would (vhosts, permissions, policies, exchanges, queues,
        bindings) and wait until the policies and queues they name exist (the import is asynchronous)."""
        path = self.dir / f"definitions-{secrets.token_hex(4)}.json"
        path.write_text(json.dumps(definitions))
        self.ctl("import_definitions", str(path))
        wanted = [(p["vhost"], "list_policies", p["name"]) for p in definitions.get("policies", [])]
        wanted += [(q["vhost"], "list_queues", q["name"]) for q in definitions.get("queues", [])]
        deadline = time.monotonic() + timeout
        for vhost, command, name in wanted:
            while name not in {row.get("name") for row in self._json_rows(command, vhost)}:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not appear in {vhost} within {timeout:.0f} s")
                time.sleep(0.2)

    def _json_rows(self, command: str, vhost: str, *columns: str) -> list[dict]:
        try:
            return json.loads(self.ctl(command, "-p", vhost, *columns, "--formatter", "json") or "[]")
        except RuntimeError:  # the vhost is not there yet
            return []

    def queues(self, vhost: str = "/") -> list[dict]:
        """Each queue of ``vhost``: name, messages ready, unacknowledged, consumers, arguments, policy."""
        rows = self._json_rows("list_queues", vhost, "name", "messages_ready", "messages_unacknowledged",
                               "consumers", "arguments", "policy")
        for row in rows:  # rabbitmqctl's json writes a table as a list of [name, type, value]
            if isinstance(row.get("arguments"), list):
                row["arguments"] = {entry[0]: entry[-1] for entry in row["arguments"]}
        return rows

    def close(self) -> None:
        self.stop()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RabbitMQ":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ helpers
def busy_wait_of(argv: list[str]) -> dict[str, str]:
    """The busy-wait thresholds a ``beam.smp`` command line gives (erlexec passes ``+sbwt X`` as
    ``-sbwt X``; the VM applies the flags in order, so the last of each is the one in effect), for
    each flag given, up to the end of the emulator's flags (``--``)."""
    found: dict[str, str] = {}
    for flag, value in zip(argv, argv[1:]):
        if flag == "--":
            break
        if flag.startswith("-") and flag[1:] in BUSY_WAIT["none"]:
            found[flag[1:]] = value
    return found


def _password_hash(password: str) -> str:
    """RabbitMQ's rabbit_password_hashing_sha256: base64(salt + sha256(salt + password))."""
    salt = secrets.token_bytes(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def _definitions(users: tuple[str, ...]) -> dict:
    """Users (their passwords random and never used: EXTERNAL) with every permission on ``/``."""
    return {
        "vhosts": [{"name": "/"}],
        "users": [{"name": u, "password_hash": _password_hash(secrets.token_hex(16)),
                   "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ""} for u in users],
        "permissions": [{"user": u, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"} for u in users],
    }


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited ({proc.returncode}) before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(x) for x in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _find_beam(pid: int, depth: int = 4) -> int | None:
    """The beam.smp process under the rabbitmq-server script (sh -> [erl -> erlexec ->] beam.smp)."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "beam.smp":
            return pid
    except OSError:
        return None
    if depth:
        for child in _children(pid):
            found = _find_beam(child, depth - 1)
            if found:
                return found
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return  # a zombie: gone, its parent reaps it
        except OSError:
            return
        time.sleep(0.05)
    if Path(f"/proc/{pid}").exists():
        _kill(pid)


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a private RabbitMQ node with AMQP 1.0 until Ctrl-C.")
    parser.add_argument("--pki", type=Path, help="a certs PKI directory (TLS 1.3 + SASL EXTERNAL); else plain AMQP")
    parser.add_argument("--cn", default="broker.interchange.test", help="the server identity in the PKI")
    parser.add_argument("--user", default="actor-2", help="the client certificate's CN (the RabbitMQ user)")
    parser.add_argument("--busy-wait", choices=tuple(BUSY_WAIT), default="none",
                        help="the Erlang VM's scheduler busy waiting (none: RabbitMQ's start-up default)")
    args = parser.parse_args(argv)
    ensure_installed()
    files = None
    if args.pki:
        ident = args.pki / "issued" / args.cn
        files = {"chain": ident / "chain.pem", "key": ident / "key.pem", "trust": ident / "trust.pem"}
    broker = RabbitMQ(pki_files=files, user=args.user if args.pki else "guest", busy_wait=args.busy_wait)
    try:
        broker.start()
        print(f"RabbitMQ {version()} at {broker.url} (node {broker.node}, beam.smp pid {broker.beam_pid}, "
              f"dir {broker.dir})", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
