"""Test and benchmark helpers shared by tests/ and benchmarks/ (never used by a running node; the top
rank of docs/architecture.md's layers, so they may start nodes through the shell).

- ``harness``: the PKI names, a proton client, DENM/IVIM builders;
- ``broker_harness``, ``ii_harness``, ``multihop_harness``, ``monitoring_harness``: nodes in this
  process or as processes, their clients and federations;
- ``tlex_harness``, ``if2_harness``, ``rabbitmq``: the TLEX simulator, the IF2 bridge's set-up and a
  private RabbitMQ; ``pki_fixtures``, ``dns_fixtures``: TLS probes and test PKIs, a private dnsmasq;
- ``store_faults``: fault injection for the durable store; ``browser_harness``: headless Chromium.

pytest fixtures are in the tests' conftests, not here. docs/testing.md describes the harnesses.
"""
