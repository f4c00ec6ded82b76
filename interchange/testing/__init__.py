"""Test and benchmark helpers shared by tests/ and benchmarks/ (never used by a running node)."""
