"""Improved Interface (II, chapter 4 of the C-Roads IP Based Interface Profile): the HTTPS
control plane of the interchange, and the local actor API built on the same JSON.

Sub-packages by role; imports between them run downwards only (``tests/unit/test_layers.py``), and a
sub-package is given what it may not import through the Protocols of its ``doors.py``:

====  ==============  ======================================================================
rank  package         role
====  ==============  ======================================================================
0     ``selectors``   what a selector can match of a capability (three-valued, plain values);
                      the ILLEGAL policy
1     ``wire``        the JSON bodies (pydantic, Tables 9-15) and the refusals (``IIError``)
2     ``decisions``   sans-I/O decisions on those bodies: incoming grants, RESUBSCRIBE, what to
                      request where, the outgoing state machine, multi-hop routes, hand-over,
                      actors' agreements, selectors built from capabilities
2     ``peers``       the other interchanges: DNS SRV discovery, the HTTPS client, the AMQP
                      federation links (door: ``MessageSink``, ``DiscoveryListener``)
3     ``storage``     the SQLite store, one repository per table
3     ``settings``    the ``[ii]`` section
4     ``resources``   one object per resource, owning its memory and rows, and reconciling
                      the broker's addresses and the neighbours with them (door: the views and
                      the events they report)
5     ``http``        the HTTPS surface: routes, OpenAPI, the TLS listener (door:
                      ``IIOperations``)
6     ``node``        the II in a node: ``IIService`` composes the objects, ``Propagation``
                      carries a change in one to the others, start/stop, the CLI
====  ==============  ======================================================================

This package imports nothing.
"""
