"""``interchange quadtree``: tiles of a position or of a circular destination area.

    interchange quadtree LAT LON [--zoom N] [--property | --selector]
    interchange quadtree --circle LAT LON RADIUS_M [--zoom N] [--property | --selector]

A position prints its tile (IP_038, default zoom 18); a circle prints one tile
per line (IP_112, default zoom 13), or the ``,t1,t2,`` property form with
``--property``, or the merged IP_066 selector with ``--selector``. The default
zooms are the message profile's; the application shell hands them to
:func:`register` (the profile lies above this package).
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn

from quadtree.cover import cover_circle
from quadtree.errors import QuadtreeUsageError
from quadtree.property import format_property
from quadtree.selector import selector_for_tiles
from quadtree.tiles import from_latlon

def register(subparsers: Any, *, point_zoom: int, circle_zoom: int) -> argparse.ArgumentParser:
    """Add the ``quadtree`` subcommand; its handler is :func:`run`. ``point_zoom`` and ``circle_zoom``
    are the default zooms of a position (IP_038's reference locations) and of a circle (IP_112's areas)."""
    parser = subparsers.add_parser(
        "quadtree",
        help="quadtree tiles of a position or a circular area (IP_037/038/112/113)",
        description=(
            "Print the quadtree tile of a WGS84 position (appendix A, default zoom "
            f"{point_zoom}) or the tiles intersecting a circle (default zoom {circle_zoom}). "
            "Negative coordinates may be given as they are, e.g. 42.03 -8.65."
        ),
    )
    parser.add_argument("lat", nargs="?", help="latitude in degrees (WGS84)")
    parser.add_argument("lon", nargs="?", help="longitude in degrees (WGS84)")
    parser.add_argument(
        "--circle",
        nargs=3,
        metavar=("LAT", "LON", "RADIUS_M"),
        help="cover the circle of RADIUS_M metres around LAT LON instead of a single position",
    )
    parser.add_argument(
        "--zoom",
        help=f"zoom level 0-30 (default {point_zoom} for a position, {circle_zoom} for --circle)",
    )
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--property", action="store_true", help="print the ',t1,t2,' quadTree property")
    form.add_argument("--selector", action="store_true", help="print the merged quadTree LIKE selector")
    parser.set_defaults(handler=run, point_zoom=point_zoom, circle_zoom=circle_zoom)
    parser.error = _one_line_error(parser)
    return parser


def _one_line_error(parser: argparse.ArgumentParser) -> Callable[[str], NoReturn]:
    """Usage errors as one line (like QuadtreeUsageError), exit status 2, no traceback."""

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} (see --help)\n")

    return error


def _number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise QuadtreeUsageError(f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise QuadtreeUsageError(f"{name} must be a finite number, got {text!r}")
    return value


def _zoom(text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise QuadtreeUsageError(f"--zoom must be an integer, got {text!r}") from None


def _tiles(args: argparse.Namespace) -> list[str]:
    if args.circle is not None:
        if args.lat is not None:
            raise QuadtreeUsageError("give either LAT LON or --circle LAT LON RADIUS_M, not both")
        lat, lon, radius = (
            _number(name, text) for name, text in zip(("latitude", "longitude", "radius"), args.circle)
        )
        return cover_circle(lat, lon, radius, _zoom(args.zoom, args.circle_zoom))
    if args.lat is None or args.lon is None:
        raise QuadtreeUsageError("give a position LAT LON or --circle LAT LON RADIUS_M")
    lat, lon = _number("latitude", args.lat), _number("longitude", args.lon)
    return [from_latlon(lat, lon, _zoom(args.zoom, args.point_zoom))]


def run(args: argparse.Namespace) -> int:
    """Print the tiles, property or selector; library ValueErrors become QuadtreeUsageErrors."""
    try:
        tiles = _tiles(args)
        if args.property:
            lines = [format_property(tiles)]
        elif args.selector:
            lines = [selector_for_tiles(tiles)]
        else:
            lines = tiles
    except ValueError as exc:
        raise QuadtreeUsageError(str(exc)) from None
    for line in lines:
        print(line)
    return 0
