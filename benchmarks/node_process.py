"""A node as its own process for the benchmarks (``interchange broker --config FILE``, its ports
read from the first line it prints), and its actors' II calls."""
from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from certs.tls import TlsFiles, client_context

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["actor_api", "machine_notes", "start_node"]

Post = Callable[[str, dict[str, Any]], Awaitable[Any]]


def start_node(config: Path, root: Path = ROOT) -> tuple[subprocess.Popen[str], int, int]:
    """The node's process (its code from the checkout ``root``), its AMQPS port and its II (HTTPS) port."""
    proc = subprocess.Popen([sys.executable, "-m", "interchange", "broker", "--config", str(config)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=root)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "interchange NAME: AMQPS port P, ..., II (HTTPS) port Q"
    if "AMQPS port" not in line:
        proc.kill()
        raise RuntimeError(f"the node did not start: {line!r}")
    amqps = int(line.split("AMQPS port ")[1].split(",")[0])
    ii = int(line.split("II (HTTPS) port ")[1].strip())
    return proc, amqps, ii


@contextlib.asynccontextmanager
async def actor_api(pki_directory: Path, actor: str, node: str, ii_port: int) -> AsyncIterator[Post]:
    """``post(path, body)`` as ``actor`` (its test-PKI certificate) to its II paths at ``node``;
    every answer must be 200 (its JSON is returned)."""
    context = client_context(TlsFiles.from_pki(pki_directory, actor, with_crls=False))
    base = f"https://127.0.0.1:{ii_port}/{actor}"
    async with aiohttp.ClientSession() as http:
        async def post(path: str, body: dict[str, Any]) -> Any:
            async with http.post(base + path, json=body, ssl=context, server_hostname=node) as response:
                assert response.status == 200, await response.text()
                return await response.json()
        yield post


def machine_notes() -> str:
    """Cores, CPU model, Python and kernel, for the figures' machine notes."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    return f"{os.cpu_count()} cores, {model}; Python {platform.python_version()}; kernel {platform.release()}"
