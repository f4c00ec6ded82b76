"""interchange.ground.ports: listen ports chosen where no outgoing connection's local port can land."""
from __future__ import annotations

import pytest

from interchange.ground.ports import listen_range


@pytest.mark.parametrize(("ephemeral_range", "expected"), [
    ((32768, 60999), range(10000, 32768)),  # Linux's default: below it
    ((10000, 40000), range(40001, 65536)),  # more room above
    ((1024, 65535), range(0)),  # no room: the kernel chooses
    ((5000, 8000), range(10000, 65536)),  # wholly below the lowest port this module uses
])
def test_the_ports_to_choose_from_are_the_larger_stretch_outside_the_ephemeral_range(
        ephemeral_range: tuple[int, int], expected: range) -> None:
    assert listen_range(ephemeral_range) == expected
