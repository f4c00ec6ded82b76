"""Quadtree geographic index for the ``quadTree`` AMQP application property.

Implements the location specification of the C-Roads IP Based Interface Profile
(section 3.3.3) and its appendix A:

* IP_037 - locations are quadtree tiles, one character per zoom level
  (:func:`from_latlon`, the appendix A algorithm, and :func:`bounds`);
* IP_038 - reference locations are published at zoom 18 (the default zoom);
* IP_112 - destination / relevance areas of IVIM, DENM and POIM-PA as tiles at
  zoom 13 (:func:`cover_circle`, :func:`cover_polygon`);
* IP_113 - destination areas of SPATEM, MAPEM, SSEM and SREM at zoom 14;
* IP_039 / IP_066 - filtering with ``quadTree LIKE '%,<tile>%'`` selectors
  (:func:`selector_for_tiles`, :func:`merge_tiles`);
* the property itself, ``",t1,t2,"`` (:func:`format_property`,
  :func:`parse_property`).

The IP_112 / IP_113 notes ("a 5 km radius needs at most 36 tiles at zoom 13",
"1 km at most 9 tiles at zoom 14") hold only south of about 66.4 and 65.8
degrees of latitude, because tiles shrink with cos(latitude); the counts are in
:mod:`quadtree.cover`.
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
