"""Regenerate ``eos_pipeline/adapters/jvm_artifacts.json`` (maintainers only; needs Maven).

The lock file pins every JVM jar the project runs (Kafka broker, ZooKeeper, Spark's Kafka
connector, the Hudi Spark bundle) with its SHA-256, so that users and CI fetch exactly these bytes
from Maven Central with plain HTTP and no Maven. This script lets Maven resolve the transitive
closure once (with strict checksum checking against Central's ``.sha1`` files), then records it.

    python tools/lock_jvm_artifacts.py            # rewrite the lock file
    python tools/lock_jvm_artifacts.py mirror     # re-resolve one bundle, keep the others as pinned
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path

REPOSITORY = "https://repo1.maven.org/maven2"
LOCK_FILE = Path(__file__).resolve().parents[1] / "eos_pipeline" / "adapters" / "jvm_artifacts.json"

# name -> (root coordinates, extra coordinates, artifactId prefixes to leave out, why)
BUNDLES: dict[str, dict] = {
    "kafka": {
        "roots": ["org.apache.kafka:kafka_2.13:4.3.1", "org.slf4j:slf4j-simple:1.7.36"],
        "exclude": [],
        "about": "Apache Kafka broker, run in KRaft mode (combined broker + controller)",
    },
    "zookeeper": {
        "roots": [
            "org.apache.zookeeper:zookeeper:3.9.4",
            "org.slf4j:slf4j-simple:2.0.13",
            # "provided" in ZooKeeper's pom, yet its server needs both to start.
            "io.dropwizard.metrics:metrics-core:4.1.12.1",
            "org.xerial.snappy:snappy-java:1.1.10.7",
        ],
        # TLS natives for five platforms: the local stack speaks plaintext on loopback.
        "exclude": ["netty-tcnative"],
        "about": "ZooKeeper, the keeper state store",
    },
    "spark-kafka": {
        # kafka-clients named at the root so that it wins over the connector's 3.4.1
        # (CVE-2024-31141, CVE-2025-27817/27818; fixed in 3.9.1): see docs/versions.md.
        "roots": [
            "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.7",
            "org.apache.kafka:kafka-clients:3.9.1",
        ],
        # Already inside PySpark's own jars directory, at the versions Spark was built with.
        "exclude": [
            "hadoop-client",
            "scala-library",
            "slf4j-api",
            "lz4-java",
            "snappy-java",
            "zstd-jni",  # kafka-clients 3.9.1 asks for 1.5.6; PySpark's 1.5.5 serves it
            "jsr305",
            "commons-logging",
            "spark-tags",
        ],
        "about": "Spark's Kafka source/sink for the exact Spark version PySpark ships",
    },
    "hudi": {
        "roots": ["org.apache.hudi:hudi-spark3.5-bundle_2.12:1.2.0"],
        "exclude": ["slf4j-api", "hive-storage-api"],  # both ship with PySpark
        "about": "Apache Hudi Spark bundle (self-contained)",
    },
    "hoodie-streamer": {
        # Hudi's own streamer, the peer for hand-over tests and benchmarks. The reachable Maven
        # Central holds no hudi-utilities(-slim)-bundle and no hudi-utilities newer than 0.14.0,
        # so the plain hudi-utilities jar runs on top of the 0.14.0 Spark bundle; the adapter
        # relocates its references to the bundle's shaded packages, as Hudi's utilities bundle
        # build does (eos_pipeline_tests/support/hoodie_streamer.py).
        "roots": [
            "org.apache.hudi:hudi-utilities_2.12:0.14.0",
            "org.apache.hudi:hudi-spark3.4-bundle_2.12:0.14.0",
            # 3.5.7 is not on the mirror; 3.5.5 is the nearest patch release of the same line.
            "org.apache.spark:spark-streaming-kafka-0-10_2.12:3.5.5",
            "com.twitter:bijection-avro_2.12:0.9.7",
            "com.google.protobuf:protobuf-java:3.21.7",
            "org.apache.kafka:kafka-clients:3.9.1",  # not the DStream's 3.4.1 (docs/versions.md)
        ],
        # Their poms pull Spark 3.4, Hive, AWS and GCP clients: the bundle already holds what
        # the streamer needs from those, PySpark the rest.
        "intransitive": [
            "org.apache.hudi:hudi-utilities_2.12:0.14.0",
            "org.apache.hudi:hudi-spark3.4-bundle_2.12:0.14.0",
        ],
        "exclude": [
            "scala-library",
            "scala-reflect",
            "slf4j-api",
            "lz4-java",
            "snappy-java",
            "zstd-jni",
            "jsr305",
            "spark-tags",
            "avro",
            "unused",
            # Avro 1.7's and Hadoop's own jars, which PySpark ships in newer versions.
            "hadoop-client",
            "paranamer",
            "commons-logging",
            "commons-compress",
            "jackson-core-asl",
            "jackson-mapper-asl",
            "xz",
        ],
        "about": "HoodieStreamer 0.14.0 (hudi-utilities) with its Spark bundle and Kafka DStream",
    },
    "spark-connect": {
        # The Connect server plugin at PySpark's exact version. It shades its own gRPC,
        # protobuf and Guava; Spark itself is "provided" (PySpark's jars directory).
        "roots": ["org.apache.spark:spark-connect_2.12:3.5.7"],
        "exclude": ["unused"],
        "about": "Spark Connect server for the stack's long-lived Spark (sc://)",
    },
    "mirror": {
        # MirrorMaker 2 in dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker) at the
        # broker's version. Kafka's own jars log through the SLF4J 1.7 API only, so without a
        # binding MM2 would be silent; log4j-slf4j-impl routes it to the log4j-core 2.x that
        # connect-runtime already depends on.
        "roots": [
            "org.apache.kafka:connect-mirror:4.3.1",
            "org.apache.logging.log4j:log4j-slf4j-impl:2.25.3",
        ],
        "exclude": [],
        "about": "Kafka MirrorMaker 2 (dedicated mode) for the two-cluster failover stack",
    },
}


def _pom(roots: list[str], intransitive: Collection[str] = ()) -> str:
    deps = []
    for coords in roots:
        group, artifact, version = coords.split(":")
        # A root listed as intransitive comes alone, without anything its pom depends on.
        exclusions = (
            "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion>"
            "</exclusions>"
            if coords in intransitive
            else ""
        )
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version>{exclusions}</dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>lock</groupId><artifactId>lock</artifactId><version>1</version>"
        f"<dependencies>{''.join(deps)}</dependencies></project>"
    )


def resolve(name: str, spec: dict) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "pom.xml").write_text(_pom(spec["roots"], spec.get("intransitive", ())))
        out = Path(tmp, "deps.txt")
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-C",
                "dependency:list",
                "-DincludeScope=runtime",
                f"-DoutputFile={out}",
                "-DoutputAbsoluteArtifactFilename=true",
            ],
            cwd=tmp,
            check=True,
        )
        lines = [ln.strip() for ln in out.read_text().splitlines() if ln.count(":") >= 5]
    artifacts = []
    for line in lines:
        parts = line.split(":")
        # group:artifact:type[:classifier]:version:scope:/abs/path
        path = Path(parts[-1])
        group, artifact = parts[0], parts[1]
        classifier = parts[3] if len(parts) == 7 else ""
        version = parts[-3]
        if any(artifact.startswith(prefix) for prefix in spec["exclude"]):
            continue
        coords = ":".join(p for p in (group, artifact, version, classifier) if p)
        artifacts.append(
            {
                "coords": coords,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "size": path.stat().st_size,
            }
        )
    print(f"{name}: {len(artifacts)} jars", file=sys.stderr)
    return sorted(artifacts, key=lambda a: a["coords"])


def main(only: list[str]) -> None:
    """Resolve every bundle, or only those named (the others stay exactly as already pinned)."""
    unknown = sorted(set(only) - set(BUNDLES))
    if unknown:
        sys.exit(f"unknown bundle(s) {', '.join(unknown)}; known: {', '.join(BUNDLES)}")
    pinned = json.loads(LOCK_FILE.read_text())["bundles"]
    # Bundles pinned by hand (an application archive, not a Maven closure: the registry) stay.
    bundles = {name: bundle for name, bundle in pinned.items() if name not in BUNDLES}
    for name, spec in BUNDLES.items():
        if only and name not in only and name in pinned:  # re-resolve only the ones named
            bundles[name] = pinned[name]
        else:
            bundles[name] = {"about": spec["about"], "artifacts": resolve(name, spec)}
    lock = {"repository": REPOSITORY, "bundles": bundles}
    LOCK_FILE.write_text(json.dumps(lock, indent=1) + "\n")
    print(f"wrote {LOCK_FILE}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
