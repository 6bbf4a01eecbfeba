"""The pinned versions issue 28 asks for: read from the lock file, no stack needed."""

from __future__ import annotations

from eos_pipeline.adapters.jvm_artifacts import load_lock


def _versions(bundle: str, artifact: str) -> list[tuple[int, ...]]:
    _, bundles = load_lock()
    return [
        tuple(int(x) for x in a.coords.split(":")[2].split("."))
        for a in bundles[bundle]
        if a.coords.split(":")[1] == artifact
    ]


def test_broker_and_mirror_maker_are_on_kafka_4_3_1() -> None:
    assert _versions("kafka", "kafka_2.13") == [(4, 3, 1)]
    assert _versions("mirror", "connect-mirror") == [(4, 3, 1)]


def test_spark_reads_kafka_with_clients_that_close_the_2024_2025_cves() -> None:
    # CVE-2024-31141, CVE-2025-27817 and CVE-2025-27818 are fixed in kafka-clients 3.9.1; the
    # Spark 3.5 connector alone would bring 3.4.1. One kafka-clients per class path.
    for bundle in ("spark-kafka", "hoodie-streamer"):
        assert _versions(bundle, "kafka-clients") == [(3, 9, 1)], bundle
