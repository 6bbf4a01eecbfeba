"""MirrorMaker 2 over SASL_SSL: per-cluster settings, no password in its files, narrow rights."""

from __future__ import annotations

from pathlib import Path

from eos_dev.stack.certs import write_secret
from eos_dev.stack.mirror_config import (
    ClusterSecurity,
    MirrorCluster,
    MirrorConfig,
    mirror_config,
    mm2_properties,
)
from eos_dev.stack.secure_config import SecureStackConfig, failover_acls, mirror_acls


def _props(config: MirrorConfig) -> dict[str, str]:
    return dict(line.split("=", 1) for line in mm2_properties(config).splitlines())


def _secured(tmp_path: Path) -> MirrorConfig:
    write_secret(tmp_path / "s" / "mm2.password", "mm2-secret-value")
    write_secret(tmp_path / "s" / "admin.password", "admin-secret-value")
    security = ClusterSecurity(
        str(tmp_path / "ca.pem"), "eos-mirror", str(tmp_path / "s" / "mm2.password"),
        "eos-admin", str(tmp_path / "s" / "admin.password"),
    )  # fmt: skip
    return MirrorConfig(
        state_dir=tmp_path,
        clusters=(
            MirrorCluster("main", 1, 2, False, "h:1,h:3,h:5", security, replication_factor=3),
            MirrorCluster("dr", 7, 8, False, "", security),
        ),
        rest_port=9,
    )


def test_secured_clusters_log_in_through_a_password_file_never_in_clear(tmp_path: Path) -> None:
    config = _secured(tmp_path)
    text = mm2_properties(config)
    assert "mm2-secret-value" not in text and "admin-secret-value" not in text
    props = _props(config)
    assert props["main.bootstrap.servers"] == "h:1,h:3,h:5"
    assert props["dr.bootstrap.servers"] == "127.0.0.1:7"
    for alias in ("main", "dr"):
        assert props[f"{alias}.security.protocol"] == "SASL_SSL"
        assert props[f"{alias}.sasl.mechanism"] == "SCRAM-SHA-512"
        assert f"${{dir:{tmp_path / 's'}:mm2.password}}" in props[f"{alias}.sasl.jaas.config"]
        assert props[f"{alias}.ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert props["config.providers"] == "dir"
    # A replicated cluster in the pair: MM2's topics take each cluster's default factor.
    assert props["replication.factor"] == props["offset.storage.replication.factor"] == "-1"
    # The stack's own clients (probe, readiness) log in as the probe user, read from its file.
    assert config.client_config("dr")["sasl.password"] == "admin-secret-value"
    assert "admin-secret-value" not in config.to_json()
    assert MirrorConfig.from_json(config.to_json()) == config


def test_the_plain_pair_is_unchanged(tmp_path: Path) -> None:
    config = mirror_config(tmp_path, [(1, 2), (3, 4)], rest_port=5)
    props = _props(config)
    assert not [k for k in props if "sasl" in k or "security" in k or "providers" in k]
    assert props["replication.factor"] == "1"
    assert config.client_config("A") == {}
    assert MirrorConfig.from_json(config.to_json()) == config


def test_mirror_rights_name_only_its_topics_groups_and_ids(tmp_path: Path) -> None:
    cfg = SecureStackConfig.on_ports(tmp_path, list(range(18)))
    acls = mirror_acls(cfg, "dr", "eos-mirror-probe")
    assert {a.principal for a in acls} == {"User:eos-mirror"}
    assert not [a for a in acls if a.name == "*" or a.resource == "BROKER"]
    groups = {(a.name, a.pattern) for a in acls if a.resource == "GROUP"}
    assert groups == {("dr-mm2", "LITERAL")}
    writable = {a.name for a in acls if a.resource == "TOPIC" and a.operation == "WRITE"}
    # Replicas, its internal topics and heartbeats here; never the pipeline's own topics.
    assert not [t for t in writable if t.startswith(cfg.topic_prefix)]
    assert "dr.eos." in writable and "mm2-offsets.dr.internal" in writable
    reads = {(a.name, a.operation) for a in failover_acls(cfg, "dr")}
    assert ("dr.eos.", "READ") in reads and ("mm2-offset-syncs.dr.internal", "READ") in reads
