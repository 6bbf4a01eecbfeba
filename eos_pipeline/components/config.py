"""What a user writes: every field of a pipeline and of what pipelines share, with its rules.

Each model refuses a misspelt key and checks at load what a pipeline could only get wrong at run
time; :func:`explain` names the file, the field path and what is wrong. ``{env: NAME}`` marks a
secret, read by the run's process only. The old single-file ``pipelines.yaml`` is still read
(:func:`parse_config`) so that :func:`migrate` can move it into a defs folder. No Dagster here:
the CLI reads the configuration without loading it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from eos_pipeline.core.contract import compile_contract
from eos_pipeline.core.failover import ClusterSet
from eos_pipeline.core.keeper import validate_root, validate_topic
from eos_pipeline.core.planning import DEFAULT_BULK_INSERT_MIN_RECORDS
from eos_pipeline.core.schema import (
    Column,
    Format,
    PayloadFormat,
    RegistrySettings,
    SchemaError,
    SourceColumns,
    TableSchema,
    validate_identifier,
)
from eos_pipeline.core.schema import Secret as CoreSecret

#: Where, under the defs folder, the shared resources' ``defs.yaml`` lives.
SHARED_PATH = "shared"
#: Component type names as written in ``defs.yaml``.
PIPELINE_TYPE = "eos_pipeline.KafkaTablesComponent"
SHARED_TYPE = "eos_pipeline.SharedResourcesComponent"
#: Values of ``spark.remote`` meaning "no server: Spark in the run's own process".
IN_PROCESS = ("", "local")
_PIPELINE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
#: An asset owner as Dagster takes it: an e-mail address or ``team:<name>``.
_OWNER = re.compile(r"^(team:[A-Za-z0-9_-]+|[^@\s]+@[^@\s]+\.[^@\s]+)$")
#: A ClickHouse or Hudi name (it goes into SQL and paths).
Identifier = Annotated[str, AfterValidator(lambda value: validate_identifier(value, "name"))]


class _Strict(BaseModel):
    # A misspelt key is an error, not a silently ignored setting.
    model_config = ConfigDict(extra="forbid", frozen=True)


class EnvRef(_Strict):
    """``{env: NAME}``: a secret read from the environment of the process that uses it."""

    env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


Secret = str | EnvRef


class KafkaSource(_Strict):
    bootstrap_servers: Annotated[str, Field(min_length=1)]
    topics: Annotated[list[str], Field(min_length=1)]
    #: librdkafka settings (security.protocol, sasl.*, ssl.*), values may be ``{env: NAME}``.
    client: dict[str, str | int | bool | EnvRef] = Field(default_factory=dict)
    #: Java client properties for Spark's Kafka source (without the ``kafka.`` prefix).
    spark_client: dict[str, str | EnvRef] = Field(default_factory=dict)
    dead_letter_topic: Annotated[str, AfterValidator(validate_topic)] | None = None
    #: MirrorMaker 2 failover: cluster alias -> bootstrap servers. Empty: one cluster, as before.
    #: ``bootstrap_servers`` must be one of them: the cluster read before any switch.
    clusters: dict[str, str] = Field(default_factory=dict)
    #: Flows MM2 replicates (``"A->B"``); default: between every two clusters, both ways.
    mirror_flows: list[str] | None = None
    #: MM2's ``offset-syncs.topic.location``: the cluster holding a flow's offset syncs.
    offset_syncs_location: Literal["source", "target"] = "source"
    #: Seconds a metadata or offsets request waits for Kafka's answer before the cluster counts
    #: as unreachable (a sensor tick or a run waits this out while a broker is down).
    request_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0

    @model_validator(mode="after")
    def _clusters(self) -> KafkaSource:
        if self.clusters or self.mirror_flows is not None:
            ClusterSet.parse(list(self.clusters), self.mirror_flows)  # raises a ValueError
            if self.initial_cluster is None:
                raise ValueError(f"bootstrap_servers must be one of clusters {self.clusters}")
        return self

    @property
    def initial_cluster(self) -> str | None:
        """Alias of the cluster read before any switch (None: a single-cluster pipeline)."""
        found = [a for a, servers in self.clusters.items() if servers == self.bootstrap_servers]
        return found[0] if found else None

    @field_validator("topics")
    @classmethod
    def _topics(cls, topics: list[str]) -> list[str]:
        for topic in topics:
            validate_topic(topic)
        if len(set(topics)) != len(topics):
            raise ValueError(f"topics are listed twice: {topics}")
        return topics

    @field_validator("client")
    @classmethod
    def _client(cls, client: dict[str, Any]) -> dict[str, Any]:
        forbidden = {"isolation.level", "enable.auto.commit", "group.id"} & set(client)
        if forbidden:
            raise ValueError(
                f"{sorted(forbidden)} are set by the pipeline itself (read_committed, explicit "
                "assignment, no committed group offsets) and cannot be overridden"
            )
        return client


class Batch(_Strict):
    """Per topic-partition and transaction: the most records (and bytes, ClickHouse) in one go."""

    max_records: Annotated[int, Field(gt=0)] = 100_000
    max_bytes: Annotated[int, Field(gt=0)] = 64 * 1024 * 1024
    #: A record whose key + value is larger goes to the dead-letter topic as ``Oversized``
    #: instead of into the tables. Unset: no limit (Kafka's own message size limit applies).
    max_record_bytes: Annotated[int, Field(gt=0)] | None = None


class Retry(_Strict):
    """What the lag sensors do after runs of a partition (or Hudi table) failed: ask again
    after ``backoff_seconds`` doubled per failure (at most ``max_backoff_seconds``). Why the
    newest run failed decides for how long (:mod:`eos_pipeline.core.retries`): a transient
    fault without limit, one that needs a person not at all, any other for ``max_attempts``
    runs from the same state (a permanent error must not become a crash loop). A run that moves
    the position starts the count again."""

    max_attempts: Annotated[int, Field(ge=1)] = 3
    backoff_seconds: Annotated[float, Field(ge=0)] = 2.0
    max_backoff_seconds: Annotated[float, Field(ge=0)] = 60.0


class Follow(_Strict):
    """A sensor's run keeps writing new records as they arrive (``core.planning``):
    ``clickhouse.follow`` and ``hudi.follow``."""

    #: End after this long without new records (0: runs end once caught up).
    idle_seconds: Annotated[float, Field(ge=0)] = 0.0
    #: End after this long in all, so materializations and checks keep coming.
    max_seconds: Annotated[float, Field(gt=0)] = 300.0
    #: Pause between two looks at Kafka's end offsets.
    poll_seconds: Annotated[float, Field(gt=0, le=10)] = 0.2


class ClickHouseTable(_Strict):
    """A pipeline's ClickHouse table (the server is ``clickhouse.url``, parsed by
    :func:`eos_pipeline.adapters.clickhouse.parse_url` into a ``ClickHouseTarget``)."""

    database: Identifier
    table: Identifier
    follow: Follow = Follow()
    #: Who parses the records' JSON: ``auto`` lets ClickHouse parse a chunk itself where it gives
    #: the decoder contract's verdict (chDB, integer/Float64/Bool/String columns; a refused chunk
    #: takes the Arrow path); ``native`` requires that it can; ``arrow`` never lets it.
    json_parser: Literal["auto", "native", "arrow"] = "auto"


class HudiTarget(_Strict):
    path: Annotated[str, Field(min_length=1)]
    table: Identifier
    table_type: Literal["COPY_ON_WRITE", "MERGE_ON_READ"] = "COPY_ON_WRITE"
    record_key: Annotated[list[str], Field(min_length=1)] = ["_topic", "_partition", "_offset"]
    ordering_field: str | None = "_offset"
    partition_fields: list[str] = Field(default_factory=list)
    #: ``auto``: ``bulk_insert`` for a transaction of at least ``bulk_insert_min_records`` planned
    #: records, else ``upsert`` (always when ``record_key`` lacks a source column).
    operation: Literal["upsert", "insert", "bulk_insert", "auto"] = "auto"
    bulk_insert_min_records: Annotated[int, Field(ge=1)] = DEFAULT_BULK_INSERT_MIN_RECORDS
    options: dict[str, str] = Field(default_factory=dict)
    #: The lag sensor's runs go on committing new records as they arrive, one Hudi commit each.
    follow: Follow = Follow()


class SchemaRegistry(_Strict):
    """A Confluent-compatible schema registry (``format: avro | protobuf | json_schema``)."""

    #: Base URL of the Confluent-compatible API (Apicurio: ``http://host:port/apis/ccompat/v7``).
    url: Annotated[str, Field(pattern=r"^(https?|mock)://\S+$")]
    #: HTTP basic auth; the password is best given as ``{env: NAME}``.
    username: str | None = None
    password: Secret | None = None
    #: A bearer token instead of basic auth, e.g. ``{env: REGISTRY_TOKEN}``.
    token: Secret | None = None
    #: Seconds per request before the registry counts as unreachable (the run is retried).
    timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    #: Take the table's columns from this subject's latest schema instead of ``schema:`` (e.g.
    #: ``orders-value``); the tables then follow compatible newer schemas (docs/formats.md).
    subject: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^\S+$")] | None = None
    #: Protobuf: the top-level message of the subject's file the records carry (default: the
    #: file's first message).
    message: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")] | None = None

    @model_validator(mode="after")
    def _auth(self) -> SchemaRegistry:
        if self.password is not None and self.username is None:
            raise ValueError("registry.password needs registry.username")
        if self.token is not None and self.username is not None:
            raise ValueError("registry: give either username/password or token, not both")
        return self

    def settings(self) -> RegistrySettings:
        def secret(value: Secret | None) -> CoreSecret | None:
            if value is None:
                return None
            if isinstance(value, EnvRef):
                return CoreSecret(env=value.env)
            return CoreSecret(value=value)

        return RegistrySettings(
            self.url.rstrip("/"),
            self.username,
            secret(self.password),
            secret(self.token),
            self.timeout_s,
        )


class Pipeline(_Strict):
    name: str
    kafka: KafkaSource
    #: How record values are written: JSON objects, or Confluent-framed Avro, Protobuf or JSON
    #: (JSON Schema) read through ``registry`` (docs/formats.md).
    format: Literal["json", "avro", "protobuf", "json_schema"] = "json"
    registry: SchemaRegistry | None = None
    #: Payload columns, ``name: ClickHouse type``, in order. Source columns are added. Leave
    #: it out to take the columns from ``registry.subject``.
    schema_: Annotated[dict[str, str] | None, Field(alias="schema", min_length=1)] = None
    reset: Literal["earliest", "latest"] = "earliest"
    batch: Batch = Field(default_factory=Batch)
    retry: Retry = Field(default_factory=Retry)
    clickhouse: ClickHouseTable | None = None
    hudi: HudiTarget | None = None
    #: Owners of the pipeline's assets in Dagster (e-mail addresses or ``team:<name>``).
    owners: list[str] = Field(default_factory=list)
    #: How old the newest rows of a table may get before Dagster's Asset Health calls it late
    #: (a freshness policy on both tables: warn at half, fail at this). A topic with no new
    #: records for this long shows its tables late too. Unset: no policy.
    lag_target_seconds: Annotated[float, Field(ge=60)] | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    #: The columns of ``registry.subject`` once resolved (``components.project.resolve_subject``).
    _subject_columns: TableSchema | None = PrivateAttr(default=None)

    @field_validator("owners")
    @classmethod
    def _owners(cls, owners: list[str]) -> list[str]:
        for owner in owners:
            if not _OWNER.match(owner):
                raise ValueError(f"owner {owner!r} is neither an e-mail address nor 'team:<name>'")
        return owners

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _PIPELINE_NAME.match(name):
            raise ValueError(
                f"{name!r} is not a valid pipeline name: use a letter then up to 63 of "
                "[A-Za-z0-9_] (it becomes part of Dagster names and keeper paths)"
            )
        return name

    @field_validator("schema_")
    @classmethod
    def _schema(cls, columns: dict[str, str] | None) -> dict[str, str] | None:
        if columns is None:
            return None
        try:
            for name, ch_type in columns.items():
                if not isinstance(ch_type, str):
                    raise ValueError(f"column {name!r}: type must be a string such as 'Int64'")
                Column(name, ch_type)
            # The decoder contract refuses types the two sinks would store differently.
            compile_contract(TableSchema.from_mapping(columns))
        except SchemaError as exc:
            raise ValueError(str(exc)) from None
        return columns

    @model_validator(mode="after")
    def _format(self) -> Pipeline:
        if self.format != "json" and self.registry is None:
            raise ValueError(f"format {self.format} needs a schema registry: set registry.url")
        subject = self.subject
        if self.schema_ is None and subject is None:
            raise ValueError(
                "give the payload columns: a 'schema:' mapping, or 'registry.subject' to take "
                "them from the registry"
            )
        if self.schema_ is not None and subject is not None:
            raise ValueError(
                "give either 'schema:' or 'registry.subject', not both (the subject's columns "
                "would replace the written ones)"
            )
        if self.registry is not None and self.registry.message and self.format != "protobuf":
            raise ValueError("registry.message names a Protobuf message: only for protobuf")
        return self

    @property
    def subject(self) -> str | None:
        """The registry subject the columns come from (None: a written ``schema:``)."""
        return None if self.registry is None else self.registry.subject

    def with_subject_columns(self, schema_id: int, columns: tuple[Column, ...]) -> Pipeline:
        """This pipeline with its subject's columns resolved (checked as a written schema is)."""
        resolved = TableSchema(columns, SourceColumns(), self.payload_format, schema_id)
        compile_contract(resolved)  # raises SchemaError naming the column
        if self.hudi is not None:
            _check_hudi_columns(self.hudi, resolved)
        copy = self.model_copy()
        copy._subject_columns = resolved
        return copy

    @property
    def payload_format(self) -> PayloadFormat:
        registry = None if self.registry is None else self.registry.settings()
        return PayloadFormat(Format(self.format), registry)

    @model_validator(mode="after")
    def _targets(self) -> Pipeline:
        if self.clickhouse is None and self.hudi is None:
            raise ValueError("a pipeline needs at least one target: 'clickhouse' and/or 'hudi'")
        if self.hudi is not None:
            if len(self.kafka.topics) != 1:
                raise ValueError(
                    "hudi: a Hudi table's checkpoint covers exactly one topic; this pipeline "
                    f"reads {len(self.kafka.topics)} ({self.kafka.topics}): split it into one "
                    "pipeline per topic"
                )
            if self.schema_ is not None:  # a subject's columns are checked once resolved
                _check_hudi_columns(self.hudi, self.table_schema)
        return self

    @property
    def table_schema(self) -> TableSchema:
        # Hudi has no separate timestamp type for Kafka's: both targets carry the same columns.
        if self.schema_ is not None:
            return TableSchema.from_mapping(self.schema_, SourceColumns(), self.payload_format)
        if self._subject_columns is None:
            raise SchemaError(
                f"pipeline {self.name!r}: the columns of registry subject {self.subject!r} are "
                "not resolved yet (components.project.resolve_subject does it at load)"
            )
        return self._subject_columns

    @property
    def dead_letter_topic(self) -> str:
        return self.kafka.dead_letter_topic or f"{self.kafka.topics[0]}.dlq"


def _check_hudi_columns(hudi: HudiTarget, schema: TableSchema) -> None:
    known = set(schema.column_names)
    for what, names in (
        ("record_key", hudi.record_key),
        ("partition_fields", hudi.partition_fields),
        ("ordering_field", [hudi.ordering_field] if hudi.ordering_field else []),
    ):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(
                f"hudi.{what}: {unknown} not among the table's columns {sorted(known)}"
            )


class KeeperConfig(_Strict):
    hosts: Annotated[str, Field(min_length=1)] = "127.0.0.1:2181"
    root: str = "/eos_pipeline"
    username: str | None = None
    password: Secret | None = None
    #: Seconds to wait for a connection to the keeper before it counts as unreachable.
    connect_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0

    @field_validator("root")
    @classmethod
    def _root(cls, root: str) -> str:
        return validate_root(root)


class ClickHouseConfig(_Strict):
    #: ``chdb:///path`` (embedded, one process per path) or ``http(s)://user:pass@host:port/db``.
    url: Secret = "chdb://.state/demo/chdb"


class SparkConfig(_Strict):
    """Where a run's Spark work runs: a Spark Connect server (``remote``) or in-process."""

    #: A Spark Connect server (``sc://host:port``): runs are thin clients of it. Unset or empty:
    #: Spark runs inside each run's process on ``master``.
    remote: Secret | None = None
    #: Bearer token of the Connect server (a secret: ``{env: NAME}``); Connect then uses TLS.
    token: Secret | None = None
    master: str = "local[2]"
    #: Faster JVM start for short local runs (see ``adapters.spark.spark_conf``).
    quick_start: bool = False
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("remote")
    @classmethod
    def _remote(cls, remote: Secret | None) -> Secret | None:
        if isinstance(remote, str) and "{{" not in remote:  # a template: checked once rendered
            if remote.strip().lower() in IN_PROCESS:
                return None  # e.g. ``EOS_SPARK_REMOTE=local``: Spark inside the run's process
            if not remote.startswith("sc://"):
                raise ValueError(f"remote must be an sc://host:port URL, not {remote!r}")
        return remote


class Settings(_Strict):
    """What every pipeline of a code location shares: ``SharedResourcesComponent``'s attributes."""

    keeper: KeeperConfig = Field(default_factory=KeeperConfig)
    clickhouse: ClickHouseConfig = Field(default_factory=ClickHouseConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    #: How often the sensors look at Kafka (``EOS_SENSOR_INTERVAL_SECONDS`` overrides).
    sensor_interval_seconds: Annotated[int, Field(ge=1)] = 30


class PipelinesFile(Settings):
    """A code location's whole configuration in memory: the shared settings and every pipeline
    (the ``defs.yaml`` files of a defs folder, :mod:`eos_pipeline.components.project`)."""

    pipelines: Annotated[list[Pipeline], Field(min_length=1)]
    #: Where the file came from (for messages); not read from the file.
    source: str = Field(default="<config>", exclude=True)

    @model_validator(mode="after")
    def _unique(self) -> PipelinesFile:
        names = [p.name for p in self.pipelines]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"pipeline name {name!r} is used twice")
        tables: dict[tuple[str, ...], str] = {}
        for p in self.pipelines:
            keys = []
            if p.clickhouse:
                keys.append(("clickhouse", p.clickhouse.database, p.clickhouse.table))
            if p.hudi:
                keys.append(("hudi", p.hudi.table))
            for key in keys:
                if key in tables:
                    raise ValueError(
                        f"pipelines {tables[key]!r} and {p.name!r} both write {'.'.join(key)}"
                    )
                tables[key] = p.name
        return self

    def pipeline(self, name: str) -> Pipeline:
        for p in self.pipelines:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def settings(self) -> Settings:
        return Settings.model_validate({k: getattr(self, k) for k in Settings.model_fields})


# ------------------------------------------------------------------- the old single file

_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the file and the field."""


def _substitute(value: Any, sub: Callable[[re.Match[str]], str]) -> Any:
    """``sub`` applied to every ``${NAME}`` / ``${NAME:-default}`` of a parsed YAML tree."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(sub, value)
    if isinstance(value, list):
        return [_substitute(v, sub) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, sub) for k, v in value.items()}
    return value


def interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    """Replace ``${NAME}`` / ``${NAME:-default}`` in every string of a parsed YAML tree."""

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ and environ[name] != "":
            return environ[name]
        if default is not None:
            return default
        raise ConfigError(f"environment variable {name} is not set and has no default")

    return _substitute(value, sub)


_UNION_TAGS = frozenset({"str", "int", "bool", "EnvRef"})


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(top level)"


def explain(source: str, exc: ValidationError) -> ConfigError:
    """A validation error as one line per field: ``source: field.path: what is wrong``."""
    lines = []
    errors = exc.errors(include_url=False)
    scalar = {"string_type", "int_type", "int_parsing", "bool_type", "bool_parsing"}
    if len(errors) > 1:
        # A `{env: ...}` mapping with a typo also fails the plain-value branches of the union;
        # those complaints ("should be a valid string") say nothing useful, keep the others.
        errors = [e for e in errors if not (e["type"] in scalar and isinstance(e["input"], dict))]
    for err in errors:
        # Unions report every branch; the first is the informative one for our types.
        loc = tuple(p for p in err["loc"] if p not in _UNION_TAGS)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field (misspelt?)"
        elif err["type"] == "missing":
            message = "required field is missing"
        lines.append(f"{source}: {_loc(loc).replace('schema_', 'schema')}: {message}")
    return ConfigError("\n".join(dict.fromkeys(lines)))


def parse_config(
    text: str, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> PipelinesFile:
    """Parse and validate a pipelines file's text; raise :class:`ConfigError` on any problem."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with a 'pipelines' list at the top")
    try:
        raw = interpolate(raw, os.environ if environ is None else environ)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    try:
        return PipelinesFile.model_validate({**raw, "source": source})
    except ValidationError as exc:
        raise explain(source, exc) from None


# ------------------------------------------------------------------------ the one-shot move


def to_template(value: Any) -> Any:
    """``${...}`` in every string of a parsed YAML tree as Dagster's ``{{ env... }}``: unset or
    empty gives the default, as before; no default: an error when rendered, as before."""

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if default is None:
            return "{{ env('" + name + "') }}"
        quoted = default.replace("\\", "\\\\").replace("'", "\\'")
        return "{{ env." + name + " or '" + quoted + "' }}"

    return _substitute(value, sub)


def migrate(pipelines_file: Path, defs_dir: Path) -> list[Path]:
    """Write ``defs_dir``'s component folders from ``pipelines_file``; return the files written."""
    return migrate_text(pipelines_file.read_text(), pipelines_file.name, defs_dir)


def migrate_text(text: str, source: str, defs_dir: Path) -> list[Path]:
    """:func:`migrate` for a file's text (``source`` names it); refuses, writing nothing, a text
    that does not validate or a folder that already exists."""
    parse_config(text, source)  # raises ConfigError, naming the field
    raw = yaml.safe_load(text)
    shared = {k: raw[k] for k in Settings.model_fields if k in raw}
    targets = [(defs_dir / SHARED_PATH, SHARED_TYPE, shared)]
    targets += [(defs_dir / p["name"], PIPELINE_TYPE, p) for p in raw["pipelines"]]
    taken = [str(path) for path, _, _ in targets if path.exists()]
    if taken:
        raise ConfigError(f"already there, not overwritten: {', '.join(taken)}")
    header = f"# Moved from {source} by `eos-pipeline migrate-config`.\n"
    for path, type_name, attributes in targets:
        path.mkdir(parents=True)
        written = {"type": type_name, "attributes": to_template(attributes)}
        body = yaml.safe_dump(written, sort_keys=False, default_flow_style=False)
        (path / "defs.yaml").write_text(header + body)
    return [path / "defs.yaml" for path, _, _ in targets]
