"""The shipped example config is valid for the node's config model."""
from pathlib import Path

from interchange.app.config import load_config


def test_example_config_loads() -> None:
    config = load_config(Path(__file__).resolve().parents[1] / "deploy" / "node.example.toml")
    assert config.broker.port == 5671 and config.admin.port == 9090
    assert config.tls is not None and config.tls.trust_bundle.name == "trust.pem"
    assert config.log.properties is False
    assert config.ii is not None and config.ii.discovery is not None
    assert config.ii.discovery.domains == ("c-its-interchange.eu",)
    actors = config.ii.actors  # default deny in production (issue 10, IP_068)
    assert actors is not None and actors.default == "deny"
    assert actors.rule("some-actor.example.eu") is None
    assert actors.rule("a.service-provider.example.eu") is not None
    assert config.tls.crls and config.tls.max_certificate_days == 366
