"""Avro and Protobuf into ClickHouse against JSON, on the same logical records (issue 27).

``python -m benchmarks.formats``: the benchmark's ~1.6 KB events (``benchmarks.data``) are
written three ways, JSON, Avro and Protobuf (the framed two by confluent-kafka's serializers
against a real schema registry, Confluent's wire format), to three topics. Each topic then
goes through the product's direct path into a chDB table (``ClickHousePartitionSync``, the
product's defaults: ClickHouse parses the JSON itself, framed values are judged per record
through the registry adapter's cache), and as the floor for Avro, chDB's own ``AvroConfluent``
input format parses the same Avro bytes (``format_avro_schema_registry_url`` pointing at the
same registry) into a table of the same columns: ClickHouse's parse and insert alone, no Kafka
read, no checks. Every figure's ratio is to the JSON path of the same run.

Exactness is checked on the data after each run: every Kafka offset once in its table, and
every table (the floor's too) holding the same rows as the JSON one (a checksum over every
payload column). The registry's cost per run is counted by the adapter's own counters:
requests made (``lookups``) and answers served from the process's cache (``hits``).

Starts its own ZooKeeper, Kafka and registry on free ports (or uses ``--kafka-bootstrap``,
``--zookeeper-hosts`` and ``--registry-url``). Writes ``<out>/formats.json`` and, when
``<out>/latest.json`` holds the main benchmark's figures, adds these under ``"formats"``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.data import SCHEMA, make_values
from benchmarks.harness import DATABASE, Bench, Options, Topic, timed
from benchmarks.local_stack import private_registry, private_stack
from benchmarks.report import Figure, apply_ratios, render_table, write_json
from eos_pipeline.adapters.dlq import DeadLetterWriter
from eos_pipeline.adapters.registry import RegistrySchemas, schemas_for
from eos_pipeline.core.offsets import TopicPartition
from eos_pipeline.core.schema import Format, PayloadFormat, RegistrySettings, TableSchema
from eos_pipeline.sinks.clickhouse import ClickHousePartitionSync, ClickHouseTableSpec

FORMATS = ("json", "avro", "protobuf")
JSON_PATH = "product path, JSON (ClickHouse parses it)"
AVRO_FLOOR = "chDB AvroConfluent parse + insert alone (floor)"

#: ClickHouse type of the benchmark's columns -> (Avro type, Protobuf field type).
_TYPES = {
    "Int64": ("long", 3),
    "Int32": ("int", 5),
    "Float64": ("double", 1),
    "Bool": ("boolean", 8),
    "String": ("string", 9),
    "LowCardinality(String)": ("string", 9),
}


def avro_schema() -> str:
    """The benchmark's columns as an Avro record (the writer schema)."""
    fields = [{"name": c.name, "type": _TYPES[c.ch_type][0]} for c in SCHEMA.columns]
    return json.dumps({"type": "record", "name": "Event", "namespace": "bench", "fields": fields})


def proto_class() -> Any:
    """The benchmark's columns as a proto3 message ``bench.Event``, built at run time."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="bench_event.proto", package="bench")
    fdp.syntax = "proto3"
    message = fdp.message_type.add(name="Event")
    for number, column in enumerate(SCHEMA.columns, start=1):
        message.field.add(name=column.name, number=number, type=_TYPES[column.ch_type][1], label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Event"))


def framed_values(fmt: str, records: list[dict[str, Any]], registry_url: str) -> list[bytes]:
    """``records`` in Confluent's wire format, written by confluent-kafka's serializers."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    context = SerializationContext(f"bench-{fmt}", MessageField.VALUE)
    if fmt == "avro":
        avro = AvroSerializer(client, avro_schema())
        return [avro(r, context) for r in records]
    cls = proto_class()
    proto = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
    return [proto(cls(**r), context) for r in records]


class FormatsBench:
    """The three topics, the product path over each, the floor, and their checks."""

    def __init__(self, bench: Bench, registry_url: str, batch: int) -> None:
        self.bench = bench
        self.registry = RegistrySettings(registry_url)
        self.batch = batch
        self.topics: dict[str, Topic] = {}
        self.values: dict[str, list[bytes]] = {}
        self.registry_runs: list[dict[str, Any]] = []
        self.checksums: dict[str, tuple[int, int]] = {}

    def schema(self, fmt: str) -> TableSchema:
        if fmt == "json":
            return SCHEMA
        return TableSchema(SCHEMA.columns, format=PayloadFormat(Format(fmt), self.registry))

    def produce(self, partitions: int) -> None:
        bench = self.bench
        records = [json.loads(v) for v in bench.values]
        self.values["json"] = list(bench.values)
        for fmt in ("avro", "protobuf"):
            self.values[fmt] = framed_values(fmt, records, self.registry.url)
        for fmt in FORMATS:
            bench.values = self.values[fmt]
            self.topics[fmt] = bench.produce(partitions, tag=f"-{fmt}")
        bench.values = self.values["json"]

    def product_path(self, fmt: str, name: str) -> Figure:
        """One catch-up of the format's topic through the product's ClickHouse sink."""
        bench, topic, schema = self.bench, self.topics[fmt], self.schema(fmt)
        assert bench.sink is not None
        table = f"{fmt}_{bench.run_id}_{len(bench.figures)}"
        bench.sink.ensure_table(DATABASE, table, schema)
        store = bench.store()
        pipeline = f"bench-{table}"
        spec = ClickHouseTableSpec(
            pipeline=pipeline, database=DATABASE, table=table, schema=schema, max_records=self.batch
        )
        sync = ClickHousePartitionSync(
            spec,
            bench.kafka,
            store,  # type: ignore[arg-type]
            bench.sink,
            DeadLetterWriter(bench.kafka, f"{topic.name}.dlq", pipeline),
        )
        cache = schemas_for(self.registry) if fmt != "json" else None
        before = (cache.lookups, cache.hits) if cache else (0, 0)
        with timed() as t:
            tps = [TopicPartition(topic.name, p) for p in topic.ends]
            with sync.reading(tps):
                for tp in tps:
                    sync.run(tp)
        if cache is not None:
            self.registry_runs.append(
                {
                    "format": fmt,
                    "records": topic.records,
                    "lookups": cache.lookups - before[0],
                    "cache_hits": cache.hits - before[1],
                }
            )
        store.close()
        bench.verify(name, table, topic)
        self.check_rows(name, table)
        bench.drop(table)
        return bench.add(
            Figure(
                name,
                "project",
                topic.records,
                topic.bytes,
                t.seconds,
                t.cpu_seconds,
                baseline=JSON_PATH,
                extra={"format": fmt, "batch": self.batch, "partitions": topic.partitions},
            )
        )

    def avro_floor(self, workdir: Path) -> Figure:
        """chDB's ``AvroConfluent`` over the same Avro bytes, from one file, into a table of the
        same payload columns (no source columns, no token, no checks)."""
        bench = self.bench
        data = workdir / "avro_confluent.bin"
        data.write_bytes(b"".join(self.values["avro"]))
        table = f"floor_{bench.run_id}_{len(bench.figures)}"
        columns = ", ".join(f"`{c.name}` {c.ch_type}" for c in SCHEMA.columns)
        names = ", ".join(f"`{c.name}`" for c in SCHEMA.columns)
        bench.client.command(
            f"CREATE TABLE {DATABASE}.`{table}` ({columns}) ENGINE = MergeTree ORDER BY tuple()"
        )
        with timed() as t:
            bench.client.command(
                f"INSERT INTO {DATABASE}.`{table}` ({names}) SELECT {names} "
                f"FROM file('{data}', 'AvroConfluent') "
                f"SETTINGS format_avro_schema_registry_url = '{self.registry.url}'"
            )
        topic = self.topics["avro"]
        count = bench.client.query(f"SELECT count() FROM {DATABASE}.`{table}`").result_rows[0][0]
        bench.checks[AVRO_FLOOR] = count == topic.records
        self.check_rows(AVRO_FLOOR, table)
        bench.drop(table)
        data.unlink()
        return bench.add(
            Figure(
                AVRO_FLOOR,
                "limit",
                topic.records,
                topic.bytes,
                t.seconds,
                t.cpu_seconds,
                baseline=JSON_PATH,
                note="ClickHouse's own Avro parse; no Kafka read",
            )
        )

    def check_rows(self, label: str, table: str) -> None:
        """The table holds the same rows as the JSON path's (count and a checksum over every
        payload column), or the check named ``label`` fails."""
        names = ", ".join(f"`{c.name}`" for c in SCHEMA.columns)
        rows = self.bench.client.query(
            f"SELECT count(), sum(cityHash64({names})) FROM {DATABASE}.`{table}`"
        ).result_rows[0]
        got = (int(rows[0]), int(rows[1]))
        first = self.checksums.setdefault("json", got) if label == JSON_PATH else None
        expected = first or self.checksums.get("json")
        same = expected is not None and got == expected
        self.checksums[label] = got
        self.bench.checks[f"{label}: same rows as JSON"] = same
        if not same:
            self.bench.opts.say(f"  !! {label}: (rows, checksum) {got}, JSON {expected}")


def lookup_latency_ms(settings: RegistrySettings, schema_id: int, times: int = 5) -> float:
    """Median wall time of one registry request for ``schema_id`` (a cold cache each time)."""
    samples = []
    for _ in range(times):
        fresh = RegistrySchemas(settings)
        began = time.perf_counter()
        fresh.get(schema_id)
        samples.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(samples), 2)


@contextlib.contextmanager
def _endpoints(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[str, str, str]]:
    say: Callable[[str], None] = lambda line: print(f"[stack] {line}", flush=True)  # noqa: E731
    with contextlib.ExitStack() as stack:
        if args.kafka_bootstrap:
            kafka, zk = args.kafka_bootstrap, args.zookeeper_hosts
        else:
            config = stack.enter_context(private_stack(workdir, say=say))
            kafka, zk = config.kafka_bootstrap, config.zookeeper_hosts
        registry = args.registry_url or stack.enter_context(private_registry(workdir, say=say))
        yield kafka, zk, registry


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="eos-bench-formats-"))
    started = time.time()
    say: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    try:
        with _endpoints(args, workdir) as (kafka, zk, registry_url):
            opts = Options(
                records=args.records,
                partitions=args.partitions,
                record_bytes=args.record_bytes,
                batch=args.batch,
                kafka_bootstrap=kafka,
                zookeeper_hosts=zk,
                say=say,
            )
            bench = Bench(opts, workdir)
            bench.open_engine()
            say(f"generating {args.records:,} records of ~{args.record_bytes} bytes")
            bench.values = make_values(args.records, args.record_bytes)
            formats = FormatsBench(bench, registry_url, args.batch)
            say("writing them as JSON, Avro and Protobuf; producing three topics")
            formats.produce(args.partitions)
            names = {
                "json": JSON_PATH,
                "avro": "product path, Avro (registry, Confluent framing)",
                "protobuf": "product path, Protobuf (registry, Confluent framing)",
            }
            for round_no in range(1, args.rounds + 1):
                say(f"round {round_no} of {args.rounds}")
                for fmt in FORMATS:
                    formats.product_path(fmt, names[fmt])
                formats.avro_floor(workdir)
            schema_id = int.from_bytes(formats.values["avro"][0][1:5], "big")
            latency = lookup_latency_ms(formats.registry, schema_id)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    apply_ratios(bench.figures)
    by_name = {f.name: f for f in bench.figures}
    json_fig = by_name[JSON_PATH]

    def ratio(name: str, base: Figure) -> float:
        return round(by_name[name].records_per_s / base.records_per_s, 3)

    ratios = {
        "avro_vs_json": ratio(names["avro"], json_fig),
        "protobuf_vs_json": ratio(names["protobuf"], json_fig),
        "avro_floor_vs_json": ratio(AVRO_FLOOR, json_fig),
        "avro_vs_avro_floor": ratio(names["avro"], by_name[AVRO_FLOOR]),
    }
    for name in names.values():
        ratios[f"{name}: MB per CPU-second"] = round(by_name[name].mb_per_cpu_s or 0.0, 1)
    topics = formats.topics
    doc = {
        "command": " ".join(["python -m benchmarks.formats", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "machine": {"cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg()},
        "data": {
            "records": args.records,
            "partitions": args.partitions,
            "batch": args.batch,
            "avg_record_bytes": {
                fmt: round(t.bytes / t.records, 1) for fmt, t in topics.items() if t.records
            },
        },
        "figures": [f.as_dict() for f in bench.figures],
        "ratios": ratios,
        "registry": {
            "runs": formats.registry_runs,
            "lookup_ms_median": latency,
            "note": "lookups: requests to the registry; cache_hits: records whose writer schema "
            "came from the process's cache (one schema id per format here)",
        },
        "checks": bench.checks,
    }
    doc["table"] = render_table(bench.figures)
    return doc


def save(doc: dict[str, Any], out: Path) -> Path:
    """``<out>/formats.json``, and the figures beside the main benchmark's in ``latest.json``."""
    path = out / "formats.json"
    write_json(path, doc)
    latest = out / "latest.json"
    if latest.exists():
        main = json.loads(latest.read_text())
        main["formats"] = {k: v for k, v in doc.items() if k != "table"}
        write_json(latest, main)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.formats",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=100_000, help="records per topic")
    parser.add_argument("--record-bytes", type=int, default=1600, help="JSON size per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of each topic")
    parser.add_argument("--batch", type=int, default=25_000, help="records per batch")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the best of each is kept")
    parser.add_argument("--smoke", action="store_true", help="a tiny run for CI")
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results"), help="where results go"
    )
    parser.add_argument("--kafka-bootstrap", help="use this broker instead of starting a stack")
    parser.add_argument("--zookeeper-hosts", help="use this ZooKeeper instead of starting one")
    parser.add_argument(
        "--registry-url", help="use this registry (Confluent-compatible API) instead of one's own"
    )
    args = parser.parse_args(argv)
    if bool(args.kafka_bootstrap) != bool(args.zookeeper_hosts):
        parser.error("--kafka-bootstrap and --zookeeper-hosts go together")
    if args.smoke:
        args.records, args.partitions, args.batch, args.rounds = min(args.records, 400), 2, 100, 1
    doc = run(args)
    path = save(doc, args.out)
    print()
    print(doc["table"])
    print()
    print("ratios:", json.dumps(doc["ratios"]))
    print(
        "registry:",
        json.dumps(doc["registry"]["runs"]),
        f"lookup {doc['registry']['lookup_ms_median']} ms",
    )
    print("checks:", "all passed" if all(doc["checks"].values()) else doc["checks"])
    print(f"written: {path}")
    return 0 if all(doc["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
