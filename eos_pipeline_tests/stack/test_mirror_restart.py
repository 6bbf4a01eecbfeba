"""A MirrorMaker 2 restart after the old MM2 left a transaction open (real two-cluster stack).

Seen in CI: after cluster A's broker stopped under a running MM2, a restarted MM2's B->A herder
never got past "Starting KafkaBasedLog with topic mm2-offsets.B.internal". With exactly-once
source support, MM2's workers read their internal topics ``read_committed``: a transaction the
old MM2 left open there holds the topic's last stable offset back until it closes, and the task
that would fence the old producer is never started. Here the open transaction is made on purpose
(MM2's own transactional id, a record on that offsets topic, neither committed nor aborted, a
timeout of 15 minutes) and the restart must replicate both ways again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from eos_dev.stack.mirror import MirrorStack, mirror_config, mm2_properties
from eos_dev.stack.mirror_config import ClusterSecurity


def _leave_a_transaction_open(bootstrap: str, transactional_id: str, topic: str) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 900_000,  # the brokers' maximum: open for 15 minutes
            "log_level": 3,
        }
    )
    producer.init_transactions(30.0)  # fences the running task, as a zombie's producer would
    producer.begin_transaction()
    producer.produce(topic, key=b"left-open", value=b"{}")
    assert producer.flush(30.0) == 0, "the record of the open transaction was not written"
    # Neither committed nor aborted: the producer goes away as a killed MM2's does.


def test_a_worker_out_of_sync_rejoins_in_a_second_not_five_minutes(tmp_path: Path) -> None:
    """A worker that fails to catch up with its config topic leaves its group for
    ``worker.unsync.backoff.ms`` (Connect's default: five minutes of no replication)."""
    props = dict(
        line.split("=", 1)
        for line in mm2_properties(mirror_config(tmp_path, [(1, 2), (3, 4)], 5)).splitlines()
    )
    for prefix in ("A.", "B."):
        assert int(props[f"{prefix}worker.unsync.backoff.ms"]) <= 1000


def test_the_transaction_tool_logs_in_to_a_secured_cluster_as_the_probe_user(
    tmp_path: Path,
) -> None:
    """Fencing MM2's transactions and aborting on its topics needs an administrator: the
    stack's probe user (a super user of the secured stack), with its password from its file."""
    secret = tmp_path / "probe.password"
    secret.write_text("s3cret\n")
    security = ClusterSecurity(
        ca_pem="/ca.pem",
        mirror_user="eos-mirror",
        mirror_password_file=str(tmp_path / "mirror.password"),
        probe_user="eos-admin",
        probe_password_file=str(secret),
    )
    client = security.java_client()
    assert client["security.protocol"] == "SASL_SSL"
    assert client["sasl.mechanism"] == "SCRAM-SHA-512"
    assert 'username="eos-admin" password="s3cret";' in client["sasl.jaas.config"]
    assert (client["ssl.truststore.type"], client["ssl.truststore.location"]) == ("PEM", "/ca.pem")


@pytest.mark.integration
def test_a_restarted_mirrormaker_replicates_although_the_old_one_left_a_transaction_open(
    mirror_stack: MirrorStack,
) -> None:
    said: list[str] = []
    say, mirror_stack.say = mirror_stack.say, lambda line: (said.append(line), say(line))
    try:
        # The B->A herder's source task writes its offsets to this topic on A, in its transactions.
        _leave_a_transaction_open(
            mirror_stack.bootstrap("A"), "B-mm2-MirrorSourceConnector-0", "mm2-offsets.B.internal"
        )
        old = {s.name: s.pid for s in mirror_stack.status()}["mirrormaker"]
        started = time.monotonic()
        mirror_stack.restart_mirror(timeout=90.0)  # proves replication both ways, or raises
        took = time.monotonic() - started
    finally:
        mirror_stack.say = say
    assert {s.name: s.pid for s in mirror_stack.status()}["mirrormaker"] != old
    assert any("fenced the ongoing transaction of B-mm2-MirrorSourceConnector-0" in s for s in said)
    print(f"[timing] mirrormaker restarted past an open transaction in {took:.1f}s")
