"""interchange.ground.ports: listen ports chosen where no outgoing connection's local port can land."""
from __future__ import annotations

from pathlib import Path

import pytest

from interchange.ground.ports import RESERVED_S, listen_range, reserve


@pytest.mark.parametrize(("ephemeral_range", "expected"), [
    ((32768, 60999), range(10000, 32768)),  # Linux's default: below it
    ((10000, 40000), range(40001, 65536)),  # more room above
    ((1024, 65535), range(0)),  # no room: the kernel chooses
    ((5000, 8000), range(10000, 65536)),  # wholly below the lowest port this module uses
])
def test_the_ports_to_choose_from_are_the_larger_stretch_outside_the_ephemeral_range(
        ephemeral_range: tuple[int, int], expected: range) -> None:
    assert listen_range(ephemeral_range) == expected


def test_a_port_handed_out_is_not_handed_out_again_for_the_reserved_time(tmp_path: Path) -> None:
    start = 100 * RESERVED_S
    assert reserve(18000, start, tmp_path)
    assert not reserve(18000, start + 1, tmp_path)  # the same slot: another worker's draw of it
    assert not reserve(18000, start + RESERVED_S, tmp_path)  # the next slot still sees it
    assert reserve(18001, start + 1, tmp_path)  # other ports are free to reserve
    assert reserve(18000, start + 2 * RESERVED_S, tmp_path)  # after two slots it is free again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["18000.102", "18001.100"]  # the old one forgotten
