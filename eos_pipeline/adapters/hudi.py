"""Hudi: one transaction = one Hudi commit carrying the Kafka checkpoint of the whole source.

A Hudi commit is atomic: its data files become visible only once the completed instant is on the
timeline. Putting the Kafka positions into that same commit's extra metadata makes "data written"
and "position advanced" one event, so the latest *completed* commit is the source of truth for
where the next run starts. Requested and inflight instants are never read (a failed write is
rolled back lazily, see ``_CONCURRENCY_OPTIONS``). A new table gets one empty commit before its
first data commit, made by one writer at a time (see ``_start_timeline``): Hudi would otherwise
read a failed writer's files as committed.

The checkpoint is stored as HoodieStreamer 1.x stores it (see :mod:`eos_pipeline.core.checkpoint`),
so a table can be handed over between HoodieStreamer and this project in either direction.
Commit metadata is read without a JVM (:mod:`eos_pipeline.adapters.hudi_timeline`), the same way
from an in-process session, a Spark Connect client and a sensor.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, Literal, TypedDict

from pyspark.sql import DataFrame, SparkSession

from eos_pipeline.adapters.hudi_create import table_creation_lock
from eos_pipeline.adapters.hudi_timeline import CommitInfo, completed_commits, latest_commit
from eos_pipeline.adapters.spark import (
    FENCING_EXPECTED_OPTION,
    FENCING_JAR_STEM,
    FENCING_STRATEGY_CLASS,
    SOURCE_COLUMNS,
)
from eos_pipeline.adapters.spark_remote import connect_error
from eos_pipeline.core.checkpoint import (
    CHECKPOINT_KEY_V1,
    CHECKPOINT_KEY_V2,
    CLUSTER_POSITION_SUFFIX,
    TOPIC_ID_SUFFIX,
    Checkpoint,
    CheckpointError,
    checkpoint_metadata,
    validate_checkpoint,
)
from eos_pipeline.core.errors import HudiCommitError, HudiFencedError
from eos_pipeline.core.offsets import TopicPartition

if TYPE_CHECKING:  # typing.Unpack for **kwargs needs Python 3.12
    from typing_extensions import Unpack

log = logging.getLogger(__name__)

TableType = Literal["COPY_ON_WRITE", "MERGE_ON_READ"]
Operation = Literal["upsert", "insert", "bulk_insert", "delete"]

#: Default record key: the Kafka coordinates, which identify a record uniquely and forever.
SOURCE_KEY_FIELDS: Final = tuple(SOURCE_COLUMNS.values())
DEFAULT_ORDERING_FIELD: Final = SOURCE_COLUMNS["offset"]

# Hudi's Spark datasource copies into the commit's extra metadata only the write options whose
# key starts with this option's value; it is set to the one checkpoint key being written.
COMMIT_META_PREFIX_OPTION: Final = "hoodie.datasource.write.commitmeta.key.prefix"
_WRITE_TABLE_VERSION_OPTION: Final = "hoodie.write.table.version"


#: Multi-writer safety is Hudi's own optimistic concurrency control: a commit happens under a
#: lock, after a conflict check (ours adds the checkpoint fence, see ``adapters.spark``), and a
#: writer never rolls back another writer's inflight instant (failed writes are cleaned lazily,
#: once their heartbeat expired). The file-system lock suits local and HDFS tables; point
#: ``hoodie.write.lock.provider`` at ZooKeeper (``ZookeeperBasedLockProvider``) or another
#: provider in ``options`` for object stores.
_CONCURRENCY_OPTIONS: Final[Mapping[str, str]] = {
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.clean.failed.writes.policy": "LAZY",
}
_DEFAULT_LOCK_OPTIONS: Final[Mapping[str, str]] = {
    "hoodie.write.lock.provider": (
        "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"
    ),
    # Minutes after which a lock left by a killed writer is broken (0 would mean never).
    "hoodie.write.lock.filesystem.expire": "1",
}
_CONFLICT_STRATEGY_OPTION: Final = "hoodie.write.lock.conflict.resolution.strategy"
_MANAGED_OPTIONS: Final = (
    COMMIT_META_PREFIX_OPTION,
    CHECKPOINT_KEY_V2,
    CHECKPOINT_KEY_V1,
    *_CONCURRENCY_OPTIONS,
    _CONFLICT_STRATEGY_OPTION,
    FENCING_EXPECTED_OPTION,
)


#: Settings that make small tables fast on a laptop or a 2-core CI runner. Not for production
#: tables on object storage: the metadata table and timeline-server markers exist to cut
#: listing calls there.
SMALL_TABLE_OPTIONS: Final[Mapping[str, str]] = {
    "hoodie.metadata.enable": "false",
    "hoodie.embed.timeline.server": "false",
    "hoodie.write.markers.type": "DIRECT",
    "hoodie.upsert.shuffle.parallelism": "2",
    "hoodie.insert.shuffle.parallelism": "2",
    "hoodie.bulkinsert.shuffle.parallelism": "2",
    "hoodie.delete.shuffle.parallelism": "2",
}


class WriteSettings(TypedDict, total=False):
    """How a transaction is written: shared by :func:`hudi_write_options` and
    :func:`write_transaction` so the two keyword lists cannot drift apart."""

    table_type: TableType
    record_key_fields: Sequence[str]
    ordering_field: str | None
    partition_fields: Sequence[str]
    operation: Operation
    partition_count: int | None
    topic_id: str | None
    cluster_position: str | None
    options: Mapping[str, str] | None


def hudi_write_options(
    table_name: str,
    checkpoint: Mapping[TopicPartition, int],
    *,
    table_type: TableType = "COPY_ON_WRITE",
    record_key_fields: Sequence[str] = SOURCE_KEY_FIELDS,
    ordering_field: str | None = DEFAULT_ORDERING_FIELD,
    partition_fields: Sequence[str] = (),
    operation: Operation = "upsert",
    partition_count: int | None = None,
    topic_id: str | None = None,
    cluster_position: str | None = None,
    fence_after: str | None = None,
    options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Datasource options for one transactional write; ``options`` win except where unsafe.

    ``upsert`` is the default because it makes a repeated write of the same records harmless
    (same key, same row), which protects against a caller that re-sends a range; ``insert`` and
    ``bulk_insert`` skip the index lookup and rely on the checkpoint alone. ``topic_id`` and
    ``cluster_position`` are stored next to the checkpoint. ``fence_after`` (completion time of
    the commit the write started from, "" for a new table) turns on the checkpoint fence; None
    leaves it off.
    """
    if table_type not in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        raise ValueError(f"table_type must be COPY_ON_WRITE or MERGE_ON_READ, got {table_type!r}")
    if operation not in ("upsert", "insert", "bulk_insert", "delete"):
        # delete: the rows' keys are removed (a replay drops rows of records now dead letters)
        raise ValueError(f"operation must be upsert, insert, bulk_insert or delete: {operation!r}")
    if not record_key_fields:
        raise ValueError("record_key_fields must name at least one column")
    version = (options or {}).get(_WRITE_TABLE_VERSION_OPTION)
    meta = checkpoint_metadata(checkpoint, partition_count, int(version) if version else None)
    result: dict[str, str] = {
        "hoodie.table.name": table_name,
        "hoodie.datasource.write.table.name": table_name,
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.operation": operation,
        "hoodie.datasource.write.recordkey.field": ",".join(record_key_fields),
        "hoodie.datasource.write.partitionpath.field": ",".join(partition_fields),
        "hoodie.datasource.write.hive_style_partitioning": "true",
        # A range may hold no record (only transaction markers); its commit must still exist to
        # move the checkpoint.
        "hoodie.allow.empty.commit": "true",
        "hoodie.datasource.meta.sync.enable": "false",
        "hoodie.datasource.hive_sync.enable": "false",
    }
    if ordering_field:
        result["hoodie.datasource.write.precombine.field"] = ordering_field
    for key in _MANAGED_OPTIONS:
        if options and key in options:
            raise ValueError(f"option {key!r} is managed by write_transaction")
    result.update(_DEFAULT_LOCK_OPTIONS)
    result.update(options or {})
    result.update(_CONCURRENCY_OPTIONS)
    if fence_after is not None:
        result[_CONFLICT_STRATEGY_OPTION] = FENCING_STRATEGY_CLASS
        result[FENCING_EXPECTED_OPTION] = fence_after
    key = next(iter(meta))
    result[COMMIT_META_PREFIX_OPTION] = key
    result.update(meta)
    if topic_id:
        result[key + TOPIC_ID_SUFFIX] = topic_id
    if cluster_position:
        result[key + CLUSTER_POSITION_SUFFIX] = cluster_position
    return result


class _Unchecked:
    def __repr__(self) -> str:
        return "UNCHECKED"


#: Sentinel for :func:`write_transaction`'s ``expected_previous``: do not compare.
UNCHECKED: Final = _Unchecked()


def write_transaction(
    df: DataFrame,
    table_path: str,
    table_name: str,
    checkpoint: Mapping[TopicPartition, int],
    *,
    expected_previous: Mapping[TopicPartition, int] | _Unchecked | None = UNCHECKED,
    allow_rewind: bool = False,
    **settings: Unpack[WriteSettings],
) -> CommitInfo:
    """Write ``df`` as ONE Hudi commit whose metadata holds ``checkpoint``; return that commit.

    ``checkpoint`` is the next offset of *every* partition of the source topic after this
    transaction (untouched partitions carried forward, see ``merge_checkpoint``). Before writing,
    the table's latest checkpoint is read: the new one may not drop a partition or move one
    backwards (unless ``allow_rewind``), and with ``expected_previous`` it must be exactly the
    position this run started from, which catches a second writer that committed in between.
    That early check is not atomic with the commit; the fence is: Hudi's optimistic concurrency
    control runs our conflict strategy under its commit lock, and it refuses the commit if any
    checkpoint-carrying commit completed after the one read here (:class:`HudiFencedError`).
    After writing, the latest completed commit must carry ``checkpoint``, or this raises.
    ``settings`` are those of :func:`hudi_write_options` but ``fence_after``, which is set here.
    """
    spark = df.sparkSession
    keys = settings.get("record_key_fields", SOURCE_KEY_FIELDS)
    ordering_field = settings.get("ordering_field", DEFAULT_ORDERING_FIELD)
    missing = [c for c in (*keys, *settings.get("partition_fields", ())) if c not in df.columns]
    if ordering_field and ordering_field not in df.columns:
        missing.append(ordering_field)
    if missing:
        raise HudiCommitError(f"columns {missing} are not in the data frame ({df.columns})")
    validate_checkpoint(checkpoint, settings.get("partition_count"))
    hudi_write_options(table_name, checkpoint, **settings)  # refuse bad settings before reading
    before = latest_commit(table_path)
    previous = before.checkpoint if before else None
    if not isinstance(expected_previous, _Unchecked):
        expected = dict(expected_previous) if expected_previous is not None else None
        if previous != expected:
            raise HudiFencedError(
                f"{table_path}: fenced: the table's checkpoint is {previous}, this run started "
                f"from {expected}; another writer committed in between. Nothing was written"
            )
    _check_progress(previous, checkpoint, allow_rewind)
    fence: str | None = None
    if _fencing_available(spark):
        fence = (before.completion_time or before.instant_time) if before else ""
    if before is None and not completed_commits(table_path):
        # One creator at a time: Hudi writes hoodie.properties before its commit lock, and
        # two creators at once can leave it unreadable (see ``adapters.hudi_create``).
        with table_creation_lock(table_path, settings.get("options")):
            if not completed_commits(table_path):
                _start_timeline(df, table_path, table_name, checkpoint, fence, settings)
    write_options = hudi_write_options(table_name, checkpoint, **settings, fence_after=fence)

    try:
        df.write.format("hudi").options(**write_options).mode("append").save(table_path)
    except Exception as exc:
        reason = _conflict(exc)
        if reason is None:
            clear = connect_error(spark, exc)
            if clear is None:
                raise
            raise clear from exc
        raise HudiFencedError(
            f"{table_path}: fenced: {reason}. Nothing was committed; the table's checkpoint is "
            "the other writer's, and the next run plans from it"
        ) from None

    commit = latest_commit(table_path)
    is_new = commit is not None and (before is None or commit.instant_time != before.instant_time)
    stored = settings.get("cluster_position")
    if (
        commit is None
        or not is_new
        or commit.checkpoint != dict(checkpoint)
        or commit.cluster_position != (stored or None)
    ):
        raise HudiCommitError(
            f"{table_path}: the write returned but the latest completed commit "
            f"({commit.instant_time if commit else None}) carries "
            f"{commit.checkpoint if commit else None}, not a new commit with {dict(checkpoint)}"
        )
    return commit


def _start_timeline(
    df: DataFrame,
    table_path: str,
    table_name: str,
    checkpoint: Mapping[TopicPartition, int],
    fence: str | None,
    settings: WriteSettings,
) -> None:
    """Complete one empty commit, without a checkpoint, before a new table's first data commit.

    Hudi counts a file slice as committed when its instant is on the completed timeline *or
    older than the first completed instant* (it assumes older instants were archived). On a
    table with no completed commit, a fenced or killed writer whose instant is older than the
    winner's would therefore have its files read as committed, since failed writes are cleaned
    lazily: every record twice. After this commit every data instant is younger than a
    completed one, so that cannot happen. The commit carries no checkpoint (``latest_commit``
    passes over it, like HoodieStreamer). The caller holds the table's creation lock; where no
    lock applies (see ``adapters.hudi_create``) two writers may both try it, and losing that
    race is fine as long as some empty or data commit completed.
    """
    spark = df.sparkSession
    options = hudi_write_options(table_name, checkpoint, **settings, fence_after=fence)
    for key in list(options):
        if key == COMMIT_META_PREFIX_OPTION or key.startswith(
            (CHECKPOINT_KEY_V2, CHECKPOINT_KEY_V1)
        ):
            del options[key]
    try:
        df.limit(0).write.format("hudi").options(**options).mode("append").save(table_path)
    except Exception as exc:
        # Two writers creating the table at once: the loser may fail on the half-written
        # table (e.g. "Could not load properties") rather than with a write conflict. Either
        # way, what matters is that some writer completed a commit.
        if _conflict(exc) is None and not _timeline_started(table_path):
            clear = connect_error(spark, exc)
            if clear is None:
                raise
            raise clear from exc
        log.info("%s: another writer started the timeline first (%s)", table_path, exc)
    if not completed_commits(table_path):
        raise HudiCommitError(
            f"{table_path}: the empty commit that starts a new table's timeline did not complete"
        )


def _timeline_started(table_path: str, wait_s: float = 30.0) -> bool:
    """Whether a commit completes on the table within ``wait_s`` (another writer's)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        try:
            if completed_commits(table_path):
                return True
        except Exception:  # a half-created table cannot be read yet
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def _conflict(exc: BaseException) -> str | None:
    """Why Hudi refused the commit as a write conflict, or None for any other failure."""
    for pattern in (r"eos-fenced: ([^\n]+)", r"HoodieWriteConflictException: ([^\n]+)"):
        found = re.search(pattern, str(exc))
        if found:
            return found.group(1).strip()
    return None


def _fencing_available(spark: SparkSession) -> bool:
    """The fencing strategy's jar is on the session's classpath (see ``adapters.spark``).

    Asked through the session's runtime config, which a Spark Connect client reaches too (it
    has no SparkContext); it shows the static ``spark.jars`` of the driver, local or server.
    """
    if FENCING_JAR_STEM in (spark.conf.get("spark.jars", "") or ""):
        return True
    log.warning(
        "Hudi commit without the checkpoint fence: %s is not in spark.jars", FENCING_JAR_STEM
    )
    return False


def _check_progress(
    previous: Checkpoint | None, new: Mapping[TopicPartition, int], allow_rewind: bool
) -> None:
    if previous is None:
        return
    dropped = sorted(set(previous) - set(new))
    if dropped:
        raise CheckpointError(
            f"checkpoint drops {', '.join(map(str, dropped))} held by the table's latest commit"
        )
    if allow_rewind:
        return
    back = [
        f"{tp}: {previous[tp]} -> {new[tp]}" for tp in sorted(previous) if new[tp] < previous[tp]
    ]
    if back:
        raise CheckpointError(f"checkpoint moves backwards ({'; '.join(back)})")
