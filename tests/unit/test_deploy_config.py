"""The shipped example config is valid for the node's config model."""

from interchange.app.config import load_config
from interchange.testing.paths import REPO_ROOT


def test_example_config_loads() -> None:
    config = load_config(REPO_ROOT / "deploy" / "node.example.toml")
    assert config.broker.port == 5671 and config.admin.port == 9090
    assert config.tls is not None and config.tls.trust_bundle.name == "trust.pem"
    assert config.log.properties is False
    assert config.ii is not None and config.ii.discovery is not None
    assert config.ii.discovery.domains == ("c-its-interchange.eu",)
    actors = config.ii.actors  # default deny in production (IP_068)
    assert actors is not None and actors.default == "deny"
    assert actors.rule("some-actor.example.eu") is None
    assert actors.rule("a.service-provider.example.eu") is not None
    assert config.tls.crls and config.tls.max_certificate_days == 366


def test_compose_runs_prometheus_and_grafana_with_the_monitoring_files() -> None:
    """deploy/container/compose.yaml mounts deploy/monitoring's files where the images and the
    provisioning expect them, and every file it mounts exists."""
    import yaml

    container = REPO_ROOT / "deploy" / "container"
    compose = yaml.safe_load((container / "compose.yaml").read_text())
    services = compose["services"]
    assert {"interchange", "prometheus", "grafana"} <= set(services)
    mounts = {}
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source, target = volume.split(":")[:2]
            if source.startswith("."):
                assert (container / source).exists(), volume
            mounts[target] = source
    assert mounts["/etc/prometheus/prometheus.yml"] == "../monitoring/prometheus.yml"
    assert mounts["/etc/prometheus/rules"] == "../monitoring/rules"
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    prometheus = yaml.safe_load((container / "../monitoring/prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["rules/recording.yml", "rules/alerts.yml"]
    node_files = prometheus["scrape_configs"][0]["file_sd_configs"][0]["files"]
    assert node_files == ["targets/nodes/*.yml"] and "/etc/prometheus/targets/nodes/compose.yml" in mounts
    targets = yaml.safe_load((container / "prometheus-targets.yml").read_text())
    assert targets[0]["targets"] == ["interchange:9090"] and set(targets[0]["labels"]) == {"node", "process"}
    assert mounts["/etc/grafana/provisioning"] == "../monitoring/grafana/provisioning"
    provider = yaml.safe_load((container / "../monitoring/grafana/provisioning/dashboards/interchange.yml").read_text())
    assert mounts[provider["providers"][0]["options"]["path"]] == "../monitoring/grafana/dashboards"
