"""Improved Interface (II, chapter 4 of the C-Roads IP Based Interface Profile): the HTTPS control plane.

The interchange's control plane, and the local actor API built on the same JSON. Sub-packages by
role, ranked: ``selectors`` (0), ``wire`` (1), ``decisions`` and ``peers`` (2), ``storage`` and
``settings`` (3), ``resources`` (4), ``http`` (5), ``node`` (6). Imports between them run downwards
only (``tests/unit/test_layers.py``); a sub-package is given what it may not import through the
Protocols of its ``doors.py``. This package imports nothing. What each sub-package holds:
docs/architecture.md ("Control plane"); the design: docs/improved-interface.md.
"""
