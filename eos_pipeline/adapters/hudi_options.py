"""Hudi datasource write options for one transactional commit: the table's identity and keys,
the multi-writer settings, the checkpoint carried in the commit metadata."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal, TypedDict

from eos_pipeline.adapters.spark import (
    FENCING_EXPECTED_OPTION,
    FENCING_STRATEGY_CLASS,
    SOURCE_COLUMNS,
)
from eos_pipeline.core.checkpoint import (
    CHECKPOINT_KEY_V1,
    CHECKPOINT_KEY_V2,
    CLUSTER_POSITION_SUFFIX,
    TOPIC_ID_SUFFIX,
    checkpoint_metadata,
)
from eos_pipeline.core.offsets import TopicPartition

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
    # The datasource copies options starting with this prefix into the commit metadata.
    key = next(iter(meta))
    result[COMMIT_META_PREFIX_OPTION] = key
    result.update(meta)
    if topic_id:
        result[key + TOPIC_ID_SUFFIX] = topic_id
    if cluster_position:
        result[key + CLUSTER_POSITION_SUFFIX] = cluster_position
    return result


__all__ = [
    "CLUSTER_POSITION_SUFFIX",
    "COMMIT_META_PREFIX_OPTION",
    "DEFAULT_ORDERING_FIELD",
    "SMALL_TABLE_OPTIONS",
    "SOURCE_KEY_FIELDS",
    "TOPIC_ID_SUFFIX",
    "Operation",
    "TableType",
    "WriteSettings",
    "hudi_write_options",
]
