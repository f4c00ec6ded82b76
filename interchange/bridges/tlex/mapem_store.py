"""The last MAPEM of each controller, kept on disk (IP_049, IP_104).

IP_049: a C-ITS actor that receives a signed MAPEM stores it for 9 minutes so that it can repeat it
on the BI. The bridge keeps each controller's latest MAPEM payload with its reception time; when it
starts again within those 9 minutes it publishes the stored MAPEMs first, so the controllers'
SPATEMs (IP_104: only after the MAPEM) flow at once instead of waiting for the next MAPEM, which
a controller may send only every few minutes (IP_048). Files are written atomically (temp file +
rename); the I/O layer calls :meth:`MapemStore.save` off the event loop.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: IP_049: how long a received MAPEM is kept for repetition.
KEEP_MS = 9 * 60 * 1000
_STAMP_SIZE = 8


class MapemStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, tlc: str) -> Path:
        return self.directory / f"{tlc.encode('ascii').hex()}.mapem"  # identifiers may hold any ASCII

    def save(self, tlc: str, received_ms: int, payload: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(tlc)
        # a temp file of its own: two saves of one controller may run at once in the executor
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=path.stem, suffix=".tmp")
        with os.fdopen(fd, "wb") as file:
            file.write(received_ms.to_bytes(_STAMP_SIZE, "big") + payload)
        os.replace(temp, path)

    def load(self, tlcs: list[str], now_ms: int) -> dict[str, tuple[int, bytes]]:
        """{tlc: (received ms, payload)} of the stored MAPEMs younger than 9 minutes."""
        found = {}
        for tlc in tlcs:
            try:
                data = self._path(tlc).read_bytes()
            except OSError:
                continue
            received = int.from_bytes(data[:_STAMP_SIZE], "big")
            if len(data) > _STAMP_SIZE and 0 <= now_ms - received < KEEP_MS:
                found[tlc] = (received, data[_STAMP_SIZE:])
        return found
