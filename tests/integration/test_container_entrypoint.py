"""deploy/container: the image's entrypoint script, run directly (no container engine runs
on this machine): it refuses a missing config, runs the node until SIGTERM, passes `pki` and
`interop` through; and the Containerfile copies every package pyproject.toml installs."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from certs import create_test_pki
from interchange.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
ENTRYPOINT = ROOT / "deploy" / "container" / "entrypoint.sh"
NAME = "ixc.container.test"


def _env(config: Path) -> dict[str, str]:
    return {**os.environ, "INTERCHANGE_CONFIG": str(config), "INTERCHANGE_BIN": str(Path(sys.executable).parent / "interchange")}


def _config(tmp_path: Path, *, key: Path | None = None) -> Path:
    made = create_test_pki(tmp_path / "pki", [NAME], [])
    identity = made.identity(NAME)
    config = {"name": NAME, "data_dir": str(tmp_path / "var"),
              "tls": {"cert_chain": str(identity.chain), "key": str(key or identity.key),
                      "trust_bundle": str(made.trust_bundle), "crls": [str(c) for c in made.crls]},
              "broker": {"host": "127.0.0.1", "port": 0},
              "ii": {"host": "127.0.0.1", "port": 0,
                     "discovery": {"dns_server": "127.0.0.1", "dns_port": 9, "domains": ["container.test"]}}}
    path = tmp_path / "node.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_missing_config_is_refused_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(ENTRYPOINT)], env=_env(tmp_path / "absent.toml"), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "absent.toml not found or not readable: mount it" in done.stderr


def test_node_runs_until_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen(["bash", str(ENTRYPOINT), "node"], env=_env(_config(tmp_path)), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the node's start-up line (exec: the node is the script's process)
        assert line.startswith(f"interchange {NAME}: AMQPS port") and "II (HTTPS) port" in line, \
            line + (process.stderr.read() if process.poll() is not None and process.stderr else "")
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_missing_tls_file_is_named(tmp_path: Path) -> None:
    config = _config(tmp_path, key=tmp_path / "no-such-key.pem")
    done = subprocess.run(["bash", str(ENTRYPOINT)], env=_env(config), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no-such-key.pem" in done.stderr


def test_pki_and_interop_pass_through(tmp_path: Path) -> None:
    env = _env(tmp_path / "unused.toml")
    done = subprocess.run(["bash", str(ENTRYPOINT), "pki", "--dir", str(tmp_path / "pki"), "init-root"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and (tmp_path / "pki" / "state.json").is_file(), done.stderr
    listed = subprocess.run(["bash", str(ENTRYPOINT), "interop", "--list", "--only", "dns.*"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and listed.stdout.count("[IP_") == 3


def test_containerfile_copies_every_installed_package() -> None:
    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in includes}
    copied = set(re.findall(r"^COPY (\w+) \1$", (ROOT / "deploy" / "container" / "Containerfile").read_text(), re.M))
    assert copied == packages
