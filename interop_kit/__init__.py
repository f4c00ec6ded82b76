"""`interchange interop`: conformance checks that any C-Roads interchange can be run against.

Operators' CI points the kit at an interchange (II base URL, BI endpoint, trust bundle, client
credentials; for the refusal checks a test PKI readied with ``interchange interop prepare``) or
runs it with ``--self`` against a local two-node federation. Each check names the requirement it
proves (IP_xxx, chapters 3.3, 4 and 5) and ends passed, failed or skipped with a reason; results
are printed and written as JUnit XML and JSON. The kit depends on the wire contract only
(``ii_api.wire.models``, ``ii_api.peers.client``), on ``certs`` and on proton, never on the II
service's internals. Its modules, top-down: docs/interop-kit.md.
"""
