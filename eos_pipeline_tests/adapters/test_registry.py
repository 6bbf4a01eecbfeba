"""Framed formats judged by the contract, against confluent-kafka's ``mock://`` registry: the
pure logic (framing, decoding, verdicts, caching, error mapping), no network."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from eos_pipeline.adapters import registry
from eos_pipeline.adapters.registry import (
    RegistryAccessError,
    RegistrySchemas,
    RegistryUnavailableError,
    client_config,
    decode_values,
)
from eos_pipeline.core.decode import read_frame
from eos_pipeline.core.retries import FailureFacts, Fault, diagnose
from eos_pipeline.core.schema import Format, PayloadFormat, RegistrySettings, Secret, TableSchema
from eos_pipeline_tests.support.framed import (
    ORDER_COLUMNS,
    bad_values,
    framed_values,
    order,
)


def _schema(fmt: str, url: str = "mock://unit") -> TableSchema:
    settings = RegistrySettings(url)
    return TableSchema.from_mapping(
        ORDER_COLUMNS, payload_format=PayloadFormat(Format(fmt), settings)
    )


@pytest.fixture
def mock_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[SchemaRegistryClient]:
    """A mock registry the decoder also uses (mock stores are per client object)."""
    client = SchemaRegistryClient.new_client({"url": "mock://unit"})
    schemas = RegistrySchemas(RegistrySettings("mock://unit"), client)
    monkeypatch.setitem(registry._PROCESS_SCHEMAS, RegistrySettings("mock://unit"), schemas)
    yield client


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_records_written_by_confluents_serializers_become_the_same_rows(
    fmt: str, mock_client: SchemaRegistryClient
) -> None:
    values = framed_values(mock_client, fmt, f"orders-{fmt}", 30)
    decoded = decode_values(values, _schema(fmt))
    assert decoded.bad == [] and decoded.index == list(range(30))
    for name in ORDER_COLUMNS:
        assert decoded.columns[name] == [order(i)[name] for i in range(30)], name


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_every_bad_kind_gets_its_error_class(fmt: str, mock_client: SchemaRegistryClient) -> None:
    bad = bad_values(mock_client, fmt, f"bad-{fmt}")
    decoded = decode_values([v for v, _ in bad], _schema(fmt))
    assert decoded.index == []
    got = [(b.index, str(b.error_class)) for b in decoded.bad]
    assert got == [(i, cls) for i, (_, cls) in enumerate(bad)], [b.message for b in decoded.bad]
    again = decode_values([v for v, _ in bad], _schema(fmt))
    assert again.bad == decoded.bad  # the same bytes, the same verdicts and messages


def test_a_schema_of_another_format_is_a_decode_error(mock_client: SchemaRegistryClient) -> None:
    [avro] = framed_values(mock_client, "avro", "mixed", 1)
    decoded = decode_values([avro], _schema("protobuf"))
    assert [str(b.error_class) for b in decoded.bad] == ["DecodeError"]
    assert "is a AVRO schema" in decoded.bad[0].message


def test_json_schema_values_are_judged_by_the_json_rules(mock_client: SchemaRegistryClient) -> None:
    schema_id = mock_client.register_schema(
        "js-value", Schema(json.dumps({"type": "object"}), "JSON")
    )
    header = b"\x00" + struct.pack(">I", schema_id)
    rows = [header + json.dumps(order(i)).encode() for i in range(3)]
    decoded = decode_values(
        [*rows, header + b'{"id": "x"}', header + b"[1]"], _schema("json_schema")
    )
    assert decoded.index == [0, 1, 2]
    assert decoded.columns["tags"] == [order(i)["tags"] for i in range(3)]
    assert [str(b.error_class) for b in decoded.bad] == ["TypeMismatch", "DecodeError"]


def test_the_header_is_read_by_confluents_reader() -> None:
    frame = read_frame(b"\x00\x00\x00\x01\x02" + b"\x04\x02\x06" + b"rest", Format.PROTOBUF)
    assert not isinstance(frame, str)
    assert (frame.schema_id, frame.message_indexes, frame.payload) == (258, (1, 3), b"rest")
    frame = read_frame(b"\x00\x00\x00\x00\x07\x00", Format.PROTOBUF)
    assert not isinstance(frame, str) and frame.message_indexes == (0,)  # [] means [0]
    assert "magic byte 1" in str(read_frame(b"\x01\x00\x00\x00\x07x", Format.AVRO))
    assert "shorter" in str(read_frame(b"\x00\x00", Format.AVRO))


class _Client:
    """A registry client answering every request the same way, counting requests."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls = 0

    def get_schema(self, schema_id: int, subject_name: Any = None, fmt: Any = None) -> Schema:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


_ID5 = b"\x00\x00\x00\x00\x05" + b"\x02"


@pytest.mark.parametrize(
    "failure",
    [
        httpx2.ConnectError("Connection refused"),
        httpx2.ReadTimeout("timed out"),
        SchemaRegistryError(503, 50003, "unavailable"),
        SchemaRegistryError(500, 50001, "store error"),
    ],
    ids=["refused", "timeout", "503", "500"],
)
def test_an_unreachable_registry_is_transient_never_a_dead_letter(failure: Exception) -> None:
    client = _Client(failure)
    schemas = RegistrySchemas(RegistrySettings("http://127.0.0.1:9/apis/ccompat/v7"), client)
    schema = _schema("avro", "http://127.0.0.1:9/apis/ccompat/v7")
    from eos_pipeline.core.decode import decode_framed

    with pytest.raises(RegistryUnavailableError, match="could not be reached") as info:
        decode_framed([_ID5], schema, schemas)
    facts = FailureFacts(errors=((type(info.value).__name__, str(info.value)),))
    assert diagnose(facts).fault is Fault.TRANSIENT
    assert schemas.lookups == 0  # nothing cached: the next run asks again


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (SchemaRegistryError(401, 40101, "unauthorized"), "not authorized"),
        (SchemaRegistryError(403, 40301, "forbidden"), "not authorized"),
        (SchemaRegistryError(404, -1, "HTTP 404 Not Found"), "invalid url"),
    ],
)
def test_refused_credentials_or_a_wrong_url_need_a_person(failure: Exception, words: str) -> None:
    schemas = RegistrySchemas(RegistrySettings("http://r/apis/ccompat/v7"), _Client(failure))
    with pytest.raises(RegistryAccessError, match=words) as info:
        schemas.get(5)
    facts = FailureFacts(errors=((type(info.value).__name__, str(info.value)),))
    assert diagnose(facts).fault is Fault.NEEDS_PERSON


def test_each_id_is_asked_once_per_process_unknown_ones_too() -> None:
    client = _Client(Schema('{"type": "record", "name": "R", "fields": []}', "AVRO"))
    schemas = RegistrySchemas(RegistrySettings("http://r"), client)
    for _ in range(3):
        assert schemas.get(5) is not None
    assert (client.calls, schemas.lookups, schemas.hits) == (1, 1, 2)
    client.answer = SchemaRegistryError(404, 40403, "Schema not found")
    assert schemas.get(6) is None and schemas.get(6) is None
    assert client.calls == 2


def test_credentials_come_from_the_environment_of_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REG_PASSWORD", "s3cret")
    conf = client_config(RegistrySettings("http://r", "me", Secret(env="REG_PASSWORD")))
    assert conf["basic.auth.user.info"] == "me:s3cret"
    monkeypatch.setenv("REG_TOKEN", "tok")
    conf = client_config(RegistrySettings("http://r", token=Secret(env="REG_TOKEN")))
    assert conf["bearer.auth.token"] == "tok"
    SchemaRegistryClient(conf)  # the client takes these settings
    monkeypatch.delenv("REG_TOKEN")
    with pytest.raises(RegistryAccessError, match="REG_TOKEN is not set"):
        client_config(RegistrySettings("http://r", token=Secret(env="REG_TOKEN")))
    assert "s3cret" not in repr(RegistrySettings("http://r", "me", Secret(value="s3cret")))


def test_json_pipelines_keep_their_own_decoder() -> None:
    schema = TableSchema.from_mapping({"id": "Int64"})
    decoded = decode_values([b'{"id": 1}', b"x"], schema)
    assert decoded.columns["id"] == [1] and [str(b.error_class) for b in decoded.bad] == [
        "DecodeError"
    ]
