"""The application shell: the only layer that assembles the others.

The node runtime (:mod:`~interchange.app.node`: broker, II, bridges, admin endpoint and broker
processes from one :mod:`~interchange.app.config`), the ``interchange`` command
(:mod:`~interchange.app.cli`, which registers every package's subcommands) and the demos that
start whole nodes (``demo``, ``tlex-demo``, ``interop --self``). Nothing outside this package (and
``interchange.__main__``) imports it (tests/unit/test_layers.py).
"""
