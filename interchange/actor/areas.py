"""Areas as quadtree tiles (appendix A): a point and a radius, a polygon, or tiles given as such.

IP_038: a message's reference location is a tile of zoom 18 (the profile's ``REFERENCE_ZOOM``);
IP_112/IP_113: its area (destination, relevance) is covered by tiles of the zoom of its message
type's ``area_zoom`` in the profile (13 for IVIM, DENM and POIM-PA, 14 for SPATEM, MAPEM, SREM
and SSEM). A capability's ``quadTree`` covers the whole dataset: the same area tiles. The tiles
are :mod:`quadtree`'s; its ValueError becomes an :class:`~interchange.actor.errors.ActorError`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

import quadtree
from quadtree.tiles import check_tile
from interchange.actor.errors import ActorError
from interchange.ground.profile import EVENT_AREA, MESSAGE_TYPES, REFERENCE_ZOOM, MessageType

__all__ = ["Area", "Circle", "Polygon", "Tiles", "area_tiles", "area_zoom", "parse_area", "parse_point",
           "reference_tile"]


@dataclass(frozen=True)
class Circle:
    """Every point within ``radius_m`` metres of (lat, lon)."""

    lat: float
    lon: float
    radius_m: float = 0.0


@dataclass(frozen=True)
class Polygon:
    """A simple polygon of (lat, lon) vertices."""

    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Tiles:
    """Tiles given as they are (digits 0-3)."""

    tiles: tuple[str, ...]


Area = Circle | Polygon | Tiles


def area_zoom(message_type: str) -> int:
    """The zoom of the tiles covering a message type's area (IP_112/113); the event zoom (IP_112)
    for a type the profile gives none (CAM, CPM)."""
    try:
        spec = MESSAGE_TYPES[MessageType(message_type)]
    except ValueError:
        raise ActorError(f"unknown message type {message_type!r}",
                         f"use one of {', '.join(t.value for t in MessageType)}") from None
    return (spec.area_zoom or EVENT_AREA).zoom


def area_tiles(area: Area, zoom: int) -> list[str]:
    """The tiles of ``zoom`` covering ``area`` (given tiles are kept as they are)."""
    try:
        match area:
            case Circle(lat=lat, lon=lon, radius_m=radius):
                return quadtree.cover_circle(lat, lon, radius, zoom)
            case Polygon(points=points):
                return quadtree.cover_polygon(points, zoom)
            case Tiles(tiles=tiles):
                if not tiles or not all(tiles):
                    raise ValueError("an empty tile list or tile")
                return [check_tile(tile) for tile in tiles]
            case _:
                assert_never(area)
    except ValueError as exc:
        raise ActorError(f"area: {exc}", "a latitude -85.05..85.05, a longitude -180..180, a radius in metres, "
                         "tiles of the digits 0-3") from None


def reference_tile(lat: float, lon: float) -> str:
    """IP_038: the tile of zoom 18 holding the reference location."""
    try:
        return quadtree.from_latlon(lat, lon, REFERENCE_ZOOM)
    except ValueError as exc:
        raise ActorError(f"position: {exc}", "latitude -85.05..85.05, longitude -180..180 (WGS84)") from None


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ActorError(f"{what}: {text!r} is not a number") from None


def parse_point(text: str) -> tuple[float, float]:
    """"LAT,LON" as two numbers."""
    lat, sep, lon = text.partition(",")
    if not sep:
        raise ActorError(f"point {text!r}: write LAT,LON (e.g. 51.4449,4.9238)")
    return _number(lat.strip(), "latitude"), _number(lon.strip(), "longitude")


def parse_area(*, point: str | None = None, radius_m: float | None = None, polygon: str | None = None,
               tiles: str | None = None) -> Area | None:
    """An area from command-line text: ``point`` "LAT,LON" (+ ``radius_m``), ``polygon``
    "LAT,LON;LAT,LON;..." or ``tiles`` "t1,t2"; None when none is given; two are an error."""
    given = [name for name, value in (("--point", point), ("--polygon", polygon), ("--tiles", tiles)) if value]
    if len(given) > 1:
        raise ActorError(f"{' and '.join(given)} both describe the area", "give one of them")
    if point:
        lat, lon = parse_point(point)
        return Circle(lat, lon, radius_m or 0.0)
    if polygon:
        return Polygon(tuple(parse_point(p) for p in polygon.split(";") if p.strip()))
    if tiles:
        return Tiles(tuple(t.strip() for t in tiles.split(",") if t.strip()))
    return None
