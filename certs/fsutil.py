"""Atomic file writes: a temporary file in the same directory, then os.replace.

Private keys are created with mode 0600 from the start (os.open with an explicit mode), never
made private afterwards with chmod.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644


def write_atomic(path: Path, data: bytes, *, mode: int = PUBLIC_MODE) -> None:
    """Replace ``path`` with ``data`` atomically; the new file has ``mode`` (minus the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            continue
        break
    else:  # pragma: no cover - 100 collisions of random names
        raise FileExistsError(f"cannot create a temporary file next to {path}")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_private(path: Path, data: bytes) -> None:
    """Write secret material (a private key) atomically with mode 0600."""
    write_atomic(path, data, mode=PRIVATE_MODE)
