"""The last MAPEM of each controller, kept on disk (IP_049, IP_104).

IP_049: a C-ITS actor that receives a signed MAPEM stores it for 9 minutes so that it can repeat it
on the BI. The bridge keeps each controller's latest MAPEM payload with its reception time; when it
starts again within those 9 minutes it publishes the stored MAPEMs first, so the controllers'
SPATEMs (IP_104: only after the MAPEM) flow at once instead of waiting for the next MAPEM, which
a controller may send only every few minutes (IP_048). Files are written atomically (temp file +
rename). The I/O layer calls :meth:`MapemStore.save_all` off the event loop, one call at a time
(a single writer: each controller's temp file has a fixed name), with only the latest MAPEM of
each controller that arrived meanwhile.
"""
from __future__ import annotations

import os
from pathlib import Path

from interchange.ground.profile import MESSAGE_TYPES, MessageType

#: IP_049: how long a received MAPEM is kept for repetition: IP_048's interval (the profile's 9 min).
KEEP_MS = MESSAGE_TYPES[MessageType.MAPEM].repetition.interval_ms
_STAMP_SIZE = 8


class MapemStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, tlc: str) -> Path:
        return self.directory / f"{tlc.encode('ascii').hex()}.mapem"  # identifiers may hold any ASCII

    def save(self, tlc: str, received_ms: int, payload: bytes) -> None:
        self.save_all({tlc: (received_ms, payload)})

    def save_all(self, mapems: dict[str, tuple[int, bytes]]) -> None:
        """{tlc: (received ms, payload)}, each replacing the controller's stored one. One writer at a
        time (the temp file's name is fixed per controller)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for tlc, (received_ms, payload) in mapems.items():
            path = self._path(tlc)
            temp = path.with_suffix(".tmp")
            temp.write_bytes(received_ms.to_bytes(_STAMP_SIZE, "big") + payload)
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
