"""Quadtree geographic index for the ``quadTree`` AMQP application property.

The location specification of the C-Roads IP Based Interface Profile (section 3.3.3, appendix A):
IP_037 tiles (:func:`from_latlon`, :func:`bounds`), IP_038 reference locations at zoom 18 (the
default zoom), IP_112/IP_113 area covers at zooms 13/14 (:func:`cover_circle`,
:func:`cover_polygon`), IP_039/IP_066 ``quadTree LIKE '%,<tile>%'`` selectors
(:func:`selector_for_tiles`, :func:`merge_tiles`) and the ``",t1,t2,"`` property
(:func:`format_property`, :func:`parse_property`). Which function meets which requirement, and
where the IP_112/IP_113 tile-count notes stop holding: docs/quadtree.md.
"""
from quadtree.cover import EARTH_RADIUS_M, MAX_TILES, cover_circle, cover_polygon
from quadtree.property import format_property, parse_property
from quadtree.selector import merge_tiles, selector_for_tiles
from quadtree.tiles import MAX_LATITUDE, MAX_ZOOM, bounds, children, from_latlon, parent

__all__ = [
    "EARTH_RADIUS_M",
    "MAX_LATITUDE",
    "MAX_TILES",
    "MAX_ZOOM",
    "bounds",
    "children",
    "cover_circle",
    "cover_polygon",
    "format_property",
    "from_latlon",
    "merge_tiles",
    "parent",
    "parse_property",
    "selector_for_tiles",
]
