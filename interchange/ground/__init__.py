"""The ground layer: what every other layer shares and nothing of ours lies under.

:mod:`~interchange.ground.errors` (the user-facing error), :mod:`~interchange.ground.timing`
(clock and back-off), :mod:`~interchange.ground.ports` (free listen ports),
:mod:`~interchange.ground.logformat` (the JSON-lines log schema),
:mod:`~interchange.ground.logfile` (log settings, rotation and the writer thread) and
:mod:`~interchange.ground.profile` (the C-Roads message profile as data). These modules
import only the standard library, third-party packages and each other (tests/unit/test_layers.py).
"""
