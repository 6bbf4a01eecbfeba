"""The stack's schema registry: started by the stack's code, proven by a real API request,
stopped by ``down``; confluent-kafka's registry client and serializers work against it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from eos_dev.stack.config import StackConfig
from eos_dev.stack.registry import registry_ready
from eos_dev.stack.services import Stack, free_port, pid_alive


def test_session_registry_round_trips_avro_through_the_confluent_api(schema_registry: str) -> None:
    client = SchemaRegistryClient({"url": schema_registry})
    schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]})
    ctx = SerializationContext("stack-registry-roundtrip", MessageField.VALUE)
    framed = AvroSerializer(client, schema)({"id": 7}, ctx)
    assert framed[0] == 0 and len(framed) > 5
    assert AvroDeserializer(client)(framed, ctx) == {"id": 7}
    with urllib.request.urlopen(f"{schema_registry}/subjects") as response:
        assert "stack-registry-roundtrip-value" in json.load(response)


def test_registry_is_listed_and_stopped_by_down(tmp_path: Path) -> None:
    config = StackConfig(state_dir=tmp_path, registry=True, registry_port=free_port())
    stack = Stack(config, say=lambda _line: None)
    assert [s.name for s in stack.status()] == ["zookeeper", "kafka", "registry"]
    assert not registry_ready(config.registry_url)
    # Only the registry: the session's Kafka is not needed here.
    from eos_dev.stack.processes import find_java

    stack._start_registry(find_java())
    try:
        status = {s.name: s for s in stack.status()}["registry"]
        assert status.running and status.endpoint == config.registry_url
        assert status.log == tmp_path / "registry" / "registry.log"
        stack._start_registry(find_java())  # a second start only checks it
        assert registry_ready(config.registry_url)
    finally:
        stack.down()
    assert status.pid is not None and not pid_alive(status.pid)
    assert not registry_ready(config.registry_url)
    assert not (tmp_path / "registry" / "pid").exists()
