"""A failover peer for the secured stack: a second SASL_SSL cluster and MirrorMaker 2 both ways.

The peer is one KRaft broker (replication factor 1) with the first cluster's CA, users and
passwords, its own ACLs on, and no ZooKeeper (the keeper stays on the first stack's ensemble).
MirrorMaker 2 logs in to both clusters over SASL_SSL as its own principal (``eos-mirror``), whose
rights on each side are :func:`~eos_dev.stack.secure_config.mirror_acls`; the pipeline gets the
extra rights a switch needs (:func:`~eos_dev.stack.secure_config.failover_acls`). MM2 replicates
the pipeline's topics (``eos.``), not the dead-letter topics: dead letters stay where they were
written. Processes reuse :class:`~eos_dev.stack.secure.SecureStack` and
:class:`~eos_dev.stack.mirror.MirrorStack` (both clusters unmanaged by the latter).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from eos_dev.stack.certs import write_secret
from eos_dev.stack.mirror import MirrorStack
from eos_dev.stack.mirror_config import (
    PROBE_TOPIC,
    ClusterSecurity,
    MirrorCluster,
    MirrorConfig,
)
from eos_dev.stack.secure import SecureStack
from eos_dev.stack.secure_config import (
    ADMIN,
    MIRROR,
    SecureStackConfig,
    failover_acls,
    mirror_acls,
)

#: MM2 aliases of the first (replicated) cluster and of its peer; replicas are ``<alias>.<topic>``.
MAIN, PEER = "main", "dr"


class SecureMirror:
    """Start and stop the peer cluster and MM2 beside a running :class:`SecureStack`."""

    def __init__(
        self,
        main: SecureStack,
        peer_ports: list[int],
        rest_port: int,
        state_dir: Path,
        say: Callable[[str], None] = print,
    ) -> None:
        self.main = main
        self.state_dir = state_dir
        self.say = say
        peer_config = SecureStackConfig.peer_on_ports(state_dir / PEER, peer_ports, main.config)
        self.peer = SecureStack(peer_config, lambda line: say(f"[{PEER}] {line}"))
        self.mirror = MirrorStack(self._mirror_config(rest_port), say)

    def _mirror_config(self, rest_port: int) -> MirrorConfig:
        main, peer = self.main.config, self.peer.config
        secrets = self.state_dir / "mirror" / "secrets"  # MM2's and the probe's passwords only
        security = ClusterSecurity(
            ca_pem=str(main.tls_dir / "ca.pem"),
            mirror_user=MIRROR,
            mirror_password_file=str(secrets / f"{MIRROR}.password"),
            probe_user=ADMIN,
            probe_password_file=str(secrets / f"{ADMIN}.password"),
        )
        clusters = tuple(
            MirrorCluster(
                alias,
                cfg.kafka_nodes[0].client_port,
                cfg.kafka_nodes[0].controller_port,
                managed=False,
                bootstrap_servers=cfg.kafka_bootstrap,
                security=security,
                replication_factor=cfg.replication_factor,
            )
            for alias, cfg in ((MAIN, main), (PEER, peer))
        )
        return MirrorConfig(
            state_dir=(self.state_dir / "mirror").resolve(),
            clusters=clusters,  # type: ignore[arg-type]
            rest_port=rest_port,
            host=main.host,
            # The pipeline's topics and the probe (a list of regexes: no backslash, which a
            # properties file would eat).
            topics=f"{main.topic_prefix.replace('.', '[.]')}.*,{PROBE_TOPIC}",
            cache_dir=main.cache_dir,
        )

    def settings_of(self, alias: str) -> SecureStackConfig:
        return self.main.config if alias == MAIN else self.peer.config

    def up(self, timeout: float = 120.0) -> None:
        """Start the peer, grant MM2's and the pipeline's failover rights on both clusters, then
        start MM2 and wait until both flows replicate (idempotent)."""
        started = time.monotonic()
        self.peer.up()
        security = self.mirror.config.clusters[0].security
        assert security is not None
        for user, path in (
            (MIRROR, security.mirror_password_file),
            (ADMIN, security.probe_password_file),
        ):
            write_secret(Path(path), self.main.config.password(user))
        for stack, other in ((self.main, PEER), (self.peer, MAIN)):
            stack.grant(
                mirror_acls(stack.config, other, PROBE_TOPIC) + failover_acls(stack.config, other)
            )
            # The probe topic with the cluster's replication factor: made by the probe, it
            # would get 1, which the replicated cluster's min.insync.replicas refuses.
            stack.create_topic(PROBE_TOPIC, 1)
        self.mirror.up(timeout)
        self.say(f"secured mirror {MAIN}<->{PEER} ready in {time.monotonic() - started:.1f}s")

    def down(self) -> None:
        """Stop MM2, then the peer (the first stack is left running)."""
        self.mirror.down()
        self.peer.down()

    def processes(self) -> list[int]:
        return self.mirror.processes() + self.peer.processes()
