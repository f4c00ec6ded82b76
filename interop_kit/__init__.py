"""`interchange interop`: conformance checks that any C-Roads interchange can be run against.

Operators' CI points the kit at an interchange (II base URL, BI endpoint, trust bundle, client
credentials; for the refusal checks a test PKI readied with ``interchange interop prepare``) or
runs it with ``--self`` against a local two-node federation. Each check names the
requirement it proves (IP_xxx, chapters 3.3, 4 and 5 of the IP Based Interface Profile) and ends
passed, failed or skipped with a reason; results are printed and written as JUnit XML and JSON.

Modules, top-down: :mod:`interop_kit.cli` (command line; the shell's
:mod:`interchange.app.selfnode` starts ``--self``) -> :mod:`interop_kit.catalogue` (every check)
-> :mod:`interop_kit.checks_tls`, ``checks_dns``, ``checks_ii``, ``checks_bi`` ->
:mod:`interop_kit.probes`, :mod:`interop_kit.badcerts` -> :mod:`interop_kit.runner`,
:mod:`interop_kit.report` -> :mod:`interop_kit.model`. The test federation (``interchange
federation``, :mod:`interop_kit.federation`) and the soak (:mod:`interop_kit.soak`) use the demo
federation's facts (:mod:`interop_kit.demo_data`) and start nodes as ``interchange broker`` processes.
The kit depends on the project's wire contract only (``ii_api.wire.models``, ``ii_api.peers.client``), on
``certs`` (TLS settings, PKI) and on proton; never on the II service's internals.
"""
