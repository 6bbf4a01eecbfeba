"""Pure checks of the HoodieStreamer adapter: the class relocation and the command it builds.

The real run (spark-submit against Kafka and a Hudi table) is exercised by
``eos_pipeline_tests/sinks/test_hudi_handover.py``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from eos_pipeline_tests.support.hoodie_streamer import (
    STREAMER_CLASS,
    StreamerError,
    StreamerTable,
    key_generator,
    relocate_class,
    relocate_jar,
    streamer_command,
    streamer_props,
)

TAIL = b"\x00\x21\x00\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # flags, this, super, counts


def utf8(text: str) -> bytes:
    raw = text.encode()
    return b"\x01" + len(raw).to_bytes(2, "big") + raw


def class_file(entries: list[bytes], slots: int) -> bytes:
    header = b"\xca\xfe\xba\xbe\x00\x00\x00\x3d" + (slots + 1).to_bytes(2, "big")
    return header + b"".join(entries) + TAIL


def utf8_constants(data: bytes) -> list[str]:
    count = int.from_bytes(data[8:10], "big")
    pos, index, found = 10, 1, []
    while index < count:
        tag = data[pos]
        if tag == 1:
            length = int.from_bytes(data[pos + 1 : pos + 3], "big")
            found.append(data[pos + 3 : pos + 3 + length].decode())
            pos += 3 + length
        else:
            size = {5: 8, 7: 2}[tag]
            pos += 1 + size
            index += tag == 5
        index += 1
    assert data[pos:] == TAIL
    return found


def sample_class() -> bytes:
    entries = [
        utf8("com/beust/jcommander/Parameter"),
        b"\x07\x00\x01",  # Class -> #1
        b"\x05" + (2**40).to_bytes(8, "big"),  # a long takes two slots
        utf8("(Lcom/beust/jcommander/IStringConverter;)Lorg/apache/spark/sql/avro/X;"),
        utf8("com.codahale.metrics.Timer"),
        utf8("org/apache/hudi/com/beust/jcommander/Already"),
        utf8("org.apache.hudi.org.apache.http.Client"),
        utf8("org/apache/spark/sql/hudi/NotShaded"),
        utf8("org/apache/httpd/NotAPackageMatch"),
    ]
    return class_file(entries, slots=10)


def test_relocation_rewrites_only_the_shaded_packages() -> None:
    relocated = relocate_class(sample_class())
    assert utf8_constants(relocated) == [
        "org/apache/hudi/com/beust/jcommander/Parameter",
        "(Lorg/apache/hudi/com/beust/jcommander/IStringConverter;)"
        "Lorg/apache/hudi/org/apache/spark/sql/avro/X;",
        "org.apache.hudi.com.codahale.metrics.Timer",
        "org/apache/hudi/com/beust/jcommander/Already",
        "org.apache.hudi.org.apache.http.Client",
        "org/apache/spark/sql/hudi/NotShaded",
        "org/apache/httpd/NotAPackageMatch",
    ]
    # The Class entry still points at constant #1, now the shaded name.
    assert relocated[10 + 3 + len("org/apache/hudi/com/beust/jcommander/Parameter") :][:3] == (
        b"\x07\x00\x01"
    )
    assert relocate_class(relocated) == relocated, "relocating twice must change nothing"


def test_relocation_refuses_what_it_cannot_parse() -> None:
    with pytest.raises(StreamerError, match="not a class file"):
        relocate_class(b"PK\x03\x04")
    with pytest.raises(StreamerError, match="unknown constant-pool tag 2"):
        relocate_class(class_file([b"\x02\x00\x00"], slots=1))


def test_relocated_jar_is_reproducible(tmp_path: Path) -> None:
    source = tmp_path / "in.jar"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr(zipfile.ZipInfo("a/B.class", (2023, 9, 27, 12, 3, 0)), sample_class())
        jar.writestr(zipfile.ZipInfo("META-INF/x.txt", (2023, 9, 27, 12, 3, 0)), "com.beust")
    first = relocate_jar(source, tmp_path / "one.jar").read_bytes()
    second = relocate_jar(source, tmp_path / "two.jar").read_bytes()
    assert first == second
    with zipfile.ZipFile(tmp_path / "one.jar") as jar:
        assert jar.namelist() == ["a/B.class", "META-INF/x.txt"]
        assert jar.read("a/B.class") == relocate_class(sample_class())
        assert jar.read("META-INF/x.txt") == b"com.beust"


def table(**kw: object) -> StreamerTable:
    base: dict[str, object] = {
        "topic": "events",
        "table_path": "/data/events",
        "table_name": "events",
        "avro_schema": {"type": "record", "name": "r", "fields": []},
        "record_key_fields": ("a", "b"),
        "ordering_field": "b",
    }
    base.update(kw)
    return StreamerTable(**base)  # type: ignore[arg-type]


def test_props_read_committed_and_caller_wins(tmp_path: Path) -> None:
    props = streamer_props(
        table(props={"auto.offset.reset": "latest"}), "k:9092", tmp_path / "s.avsc"
    )
    assert props["isolation.level"] == "read_committed"
    assert props["auto.offset.reset"] == "latest"
    assert props["hoodie.datasource.write.recordkey.field"] == "a,b"
    assert props["hoodie.streamer.source.kafka.topic"] == "events"
    assert props["hoodie.streamer.schemaprovider.source.schema.file"].startswith("file:///")
    assert key_generator(table()).endswith("NonpartitionedKeyGenerator")
    assert key_generator(table(partition_fields=("day",))).endswith("ComplexKeyGenerator")


def test_command_is_one_sync(tmp_path: Path) -> None:
    app, extra = tmp_path / "app.jar", [tmp_path / "x.jar", tmp_path / "y.jar"]
    command = streamer_command(
        table(operation="INSERT"), tmp_path / "p.properties", source_limit=500, jars=(app, extra)
    )
    assert command[0].endswith("bin/spark-submit")
    assert command[command.index("--class") + 1] == STREAMER_CLASS
    assert command[command.index("--jars") + 1] == f"{extra[0]},{extra[1]}"
    assert command[command.index("--op") + 1] == "INSERT"
    assert command[command.index("--source-limit") + 1] == "500"
    assert str(app) in command and "--continuous" not in command


def test_table_validation() -> None:
    with pytest.raises(ValueError, match="record_key_fields"):
        table(record_key_fields=())
    with pytest.raises(ValueError, match="operation"):
        table(operation="DELETE")
